package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// aclFile is the ACL the project ships, which compose.yaml loads into every Redis.
const aclFile = "../../deploy/users.acl"

// aclUser is one "user <name> <rules>" line of an ACL file.
type aclUser struct {
	rules []string
}

// readACL parses the shipped ACL file by user name.
func readACL(t *testing.T) map[string]aclUser {
	t.Helper()
	b, err := os.ReadFile(aclFile)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]aclUser{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "user" {
			t.Fatalf("%s: %q is not a user line (an ACL file has nothing else, not even comments)", aclFile, line)
		}
		if _, dup := users[f[1]]; dup {
			t.Fatalf("%s: user %s twice", aclFile, f[1])
		}
		users[f[1]] = aclUser{rules: f[2:]}
	}
	return users
}

func (u aclUser) has(rule string) bool { return slices.Contains(u.rules, rule) }

// accepts tells whether the user is on and password is one of its passwords (>clear or #sha256).
func (u aclUser) accepts(password string) bool {
	sum := sha256.Sum256([]byte(password))
	return u.has("on") && (u.has("#"+hex.EncodeToString(sum[:])) || u.has(">"+password))
}

// credentials are the user and password of a Redis URL.
func credentials(t *testing.T, raw string) (user, password string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("Redis URL does not parse: %v", err)
	}
	password, _ = u.User.Password()
	return u.User.Username(), password
}

// composeCredentials are the user and password of a compose service's REDIS_URL.
func composeCredentials(t *testing.T, service string) (user, password string) {
	t.Helper()
	svc, ok := readCompose(t).Services[service]
	if !ok {
		t.Fatalf("compose.yaml has no %s service", service)
	}
	return credentials(t, svc.Environment["REDIS_URL"])
}

// Every Redis of compose.yaml loads the shipped ACL file, which has no default user and no user that may
// do everything; every service logs in as the user of its role, with a password the file accepts.
func TestComposeUsesTheACLUsers(t *testing.T) {
	c, users := readCompose(t), readACL(t)
	if d, ok := users["default"]; !ok || !d.has("off") {
		t.Errorf("%s: the default user is not off: %v", aclFile, d.rules)
	}
	for name, u := range users {
		for _, r := range u.rules {
			if slices.Contains([]string{"+@all", "allcommands", "~*", "allkeys", "&*", "allchannels", "nopass", "+@dangerous", "+@admin"}, r) {
				t.Errorf("%s: user %s has %s", aclFile, name, r)
			}
		}
	}
	// The producer's user may not write stock: the seeding runs as stockctl.
	role := map[string]string{"worker": "worker", "worker-redlock": "worker", "worker-cluster": "worker",
		"producer": "producer", "producer-cluster": "producer", "stockctl": "stockctl",
		"producer-seed": "stockctl", "producer-cluster-seed": "stockctl"}
	for name, svc := range c.Services {
		if svc.Image == "redis:7.0" && name != "cluster-init" { // cluster-init runs redis-cli once
			checkLoadsACL(t, name, svc.Command, svc.Volumes)
			checkBusyThreshold(t, name, svc.Command)
			continue
		}
		for k, v := range svc.Environment {
			if !strings.Contains(v, "redis://") && !strings.Contains(v, "rediss://") {
				continue
			}
			for _, raw := range strings.Split(v, ",") {
				user, password := credentials(t, strings.TrimSpace(raw))
				if user != role[name] {
					t.Errorf("%s: %s logs in as %q, want %q", name, k, user, role[name])
				}
				if u, ok := users[user]; !ok || !u.accepts(password) {
					t.Errorf("%s: %s: %s has no user %q on with that password", name, k, aclFile, user)
				}
			}
		}
	}
	checkHealthcheckUser(t, strings.Join(c.Services["redis"].Healthcheck.Test, " "), users)
}

// checkLoadsACL: a Redis service runs with --aclfile and mounts the shipped file there, read-only.
func checkLoadsACL(t *testing.T, name string, command, volumes []string) {
	t.Helper()
	i := slices.Index(command, "--aclfile")
	if i < 0 || i+1 >= len(command) {
		t.Errorf("%s does not load an ACL file: %v", name, command)
		return
	}
	if mount := "./deploy/users.acl:" + command[i+1] + ":ro"; !slices.Contains(volumes, mount) {
		t.Errorf("%s loads %s but does not mount %s there read-only: %v", name, command[i+1], aclFile, volumes)
	}
}

// checkBusyThreshold: a Redis sets busy-reply-threshold (lua-time-limit before Redis 7), after which a
// running script can be killed (SCRIPT KILL, as the stockctl user), to a second or two: below go-redis's
// 3 s read timeout.
func checkBusyThreshold(t *testing.T, name string, command []string) {
	t.Helper()
	i := slices.Index(command, "--busy-reply-threshold")
	if i < 0 || i+1 >= len(command) {
		t.Errorf("%s does not set busy-reply-threshold: %v", name, command)
		return
	}
	if ms, err := strconv.Atoi(command[i+1]); err != nil || ms < 100 || ms > 2000 {
		t.Errorf("%s: busy-reply-threshold %s, want 100..2000 (milliseconds)", name, command[i+1])
	}
}

// checkHealthcheckUser: the Redis healthcheck logs in as a user that may only PING.
func checkHealthcheckUser(t *testing.T, test string, users map[string]aclUser) {
	t.Helper()
	f := strings.Fields(test)
	user, pass := "", ""
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "--user":
			user = f[i+1]
		case "--pass":
			pass = f[i+1]
		}
	}
	u, ok := users[user]
	if !ok || !u.accepts(pass) || !strings.Contains(test, "PONG") {
		t.Errorf("the Redis healthcheck %q does not log in as a user of %s, or does not check for PONG", test, aclFile)
	}
	if !slices.Equal(slices.DeleteFunc(slices.Clone(u.rules), func(r string) bool { return !strings.HasPrefix(r, "+") }), []string{"+ping"}) {
		t.Errorf("the healthcheck user may run more than PING: %v", u.rules)
	}
}
