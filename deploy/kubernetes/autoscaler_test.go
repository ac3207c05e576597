package kubernetes

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// The base scales the workers with KEDA's Redis Streams scaler on the group's lag; components/hpa swaps it
// for an HPA on stockflow_consumer_lag. Either way exactly one autoscaler scales the Deployment: two would
// fight over its replicas.

// autoscalers are the objects of b that scale the worker's Deployment.
func (b *base) autoscalers() []string {
	var out []string
	if ref := b.scaledObject.Spec.ScaleTargetRef; ref != nil && ref.Kind == "Deployment" && ref.Name == b.deployment.Name {
		out = append(out, "ScaledObject "+b.scaledObject.Name)
	}
	if ref := b.hpa.Spec.ScaleTargetRef; ref.Kind == "Deployment" && ref.Name == b.deployment.Name {
		out = append(out, "HorizontalPodAutoscaler "+b.hpa.Name)
	}
	return out
}

// renderWithoutKEDA renders an overlay as docs/kubernetes.md shows it for a cluster without KEDA: the base
// with components/hpa. It lives outside the base, as kustomize wants.
func renderWithoutKEDA(t *testing.T) *base {
	t.Helper()
	dir := t.TempDir()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(dir, here) // kustomize takes no absolute paths
	if err != nil {
		t.Fatal(err)
	}
	overlay := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + base +
		"\ncomponents:\n  - " + filepath.Join(base, "components", "hpa") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	return renderDir(t, dir, withoutKEDA)
}

func TestOneAutoscalerScalesTheDeployment(t *testing.T) {
	for _, c := range []struct {
		name string
		b    *base
		want string
	}{
		{"the base", render(t), "ScaledObject stockflow-worker"},
		{"the base with components/hpa", renderWithoutKEDA(t), "HorizontalPodAutoscaler stockflow-worker"},
	} {
		if got := c.b.autoscalers(); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: the worker's Deployment is scaled by %v, want %s alone", c.name, got, c.want)
		}
		if c.b.deployment.Spec.Replicas != nil {
			t.Errorf("%s: the Deployment sets replicas, which every apply would reset under the autoscaler", c.name)
		}
	}
	// The two scale within the same bounds and scale down alike.
	keda, hpa := render(t).scaledObject.Spec, renderWithoutKEDA(t).hpa.Spec
	if keda.MinReplicaCount == nil || keda.MaxReplicaCount == nil || keda.Advanced == nil || keda.Advanced.HorizontalPodAutoscalerConfig == nil || hpa.MinReplicas == nil {
		t.Fatalf("the ScaledObject %+v or the HPA %+v lacks its bounds or its behaviour", keda, hpa)
	}
	if *keda.MinReplicaCount != *hpa.MinReplicas || *keda.MaxReplicaCount != hpa.MaxReplicas ||
		!reflect.DeepEqual(keda.Advanced.HorizontalPodAutoscalerConfig.Behavior, hpa.Behavior) {
		t.Errorf("the ScaledObject scales %d-%d, the HPA %d-%d, or they scale down differently", *keda.MinReplicaCount,
			*keda.MaxReplicaCount, *hpa.MinReplicas, hpa.MaxReplicas)
	}
}

// KEDA takes over the HPA stockflow-worker that earlier versions of the base created, rather than refusing
// a Deployment it scales (its admission webhook does, unless the ScaledObject names that HPA).
func TestKEDATakesOverTheHPAOfEarlierReleases(t *testing.T) {
	so, hpa := render(t).scaledObject, renderWithoutKEDA(t).hpa
	if so.Annotations[kedav1alpha1.ScaledObjectTransferHpaOwnershipAnnotation] != "true" ||
		so.Spec.Advanced == nil || so.Spec.Advanced.HorizontalPodAutoscalerConfig == nil ||
		so.Spec.Advanced.HorizontalPodAutoscalerConfig.Name != hpa.Name {
		t.Errorf("the ScaledObject does not take over the HPA %s: annotations %v, advanced %+v", hpa.Name, so.Annotations, so.Spec.Advanced)
	}
}

func TestKEDAReadsTheLagOfTheWorkersGroup(t *testing.T) {
	b := render(t)
	values, _ := env(b.container(t))
	values["WORKER_NAME"] = "stockflow-worker-0"
	withSecretFiles(t, values, "redis://worker:pw@redis:6379/0")
	cfg := workerConfig(t, values)
	want := []string{cfg.OrdersStream}
	if cfg.OrdersPartitions > 1 {
		want = nil
		for i := range cfg.OrdersPartitions {
			want = append(want, fmt.Sprintf("%s:{%d}", cfg.OrdersStream, i))
		}
	}
	var streams []string
	for _, tr := range b.scaledObject.Spec.Triggers {
		if tr.Type != "redis-streams" && tr.Type != "redis-cluster-streams" {
			t.Errorf("a trigger of type %q: want KEDA's Redis Streams scaler", tr.Type)
		}
		streams = append(streams, tr.Metadata["stream"])
		if tr.Metadata["consumerGroup"] != cfg.ConsumerGroup {
			t.Errorf("the trigger reads the group %q, the workers' is %q", tr.Metadata["consumerGroup"], cfg.ConsumerGroup)
		}
		// Without lagCount the scaler counts the pending entries, which the workers hold already.
		if lag, err := strconv.Atoi(tr.Metadata["lagCount"]); err != nil || lag <= 0 || tr.MetricType != autoscalingv2.AverageValueMetricType {
			t.Errorf("the trigger's lagCount %q, metricType %q: want a lag per worker, as an AverageValue", tr.Metadata["lagCount"], tr.MetricType)
		}
		if tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != b.triggerAuth.Name || tr.AuthenticationRef.Kind != "" {
			t.Errorf("the trigger authenticates with %+v, want the TriggerAuthentication %s", tr.AuthenticationRef, b.triggerAuth.Name)
		}
	}
	if !slices.Equal(streams, want) {
		t.Errorf("the triggers read the streams %v, the workers read %v", streams, want)
	}
}

// The trigger's metadata and the TriggerAuthentication's parameters are names KEDA's Redis Streams scaler
// reads, from where each comes: KEDA ignores a name it does not know, so a misspelt one is a setting lost.
func TestKEDAsScalerKnowsEveryParameter(t *testing.T) {
	b := render(t)
	params := kedaScalerParams(t)
	given := map[string]bool{}
	for _, tr := range b.scaledObject.Spec.Triggers {
		for name := range tr.Metadata {
			given[name] = true
			if !slices.Contains(params[name], "triggerMetadata") {
				t.Errorf("the trigger's metadata %s: KEDA's redis-streams scaler reads no such metadata (it knows %v)", name, slices.Sorted(maps.Keys(params)))
			}
		}
	}
	for _, ref := range b.triggerAuth.Spec.SecretTargetRef {
		given[ref.Parameter] = true
		if !slices.Contains(params[ref.Parameter], "authParams") {
			t.Errorf("the TriggerAuthentication's parameter %s: KEDA's redis-streams scaler takes no such parameter", ref.Parameter)
		}
		if ref.Name != "stockflow-keda" {
			t.Errorf("the parameter %s comes from the Secret %s: want stockflow-keda (the worker's Secret holds the worker's URL)", ref.Parameter, ref.Name)
		}
	}
	for _, required := range []string{"stream", "address", "username", "password"} {
		if !given[required] {
			t.Errorf("neither the trigger nor its TriggerAuthentication gives %s", required)
		}
	}
	if len(params) < 10 {
		t.Errorf("KEDA's scaler source yielded %d parameter names: the parse went wrong", len(params))
	}
}

// kedaScalerParams are the names KEDA's Redis Streams scaler reads and where it takes each from
// (triggerMetadata, authParams, resolvedEnv): the keda:"name=..., order=..." tags of its metadata structs,
// read from the source of the KEDA module go.mod requires.
func kedaScalerParams(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("go list -m github.com/kedacore/keda/v2: %v %s", err, out)
	}
	params := map[string][]string{}
	for _, file := range []string{"redis_streams_scaler.go", "redis_scaler.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "pkg", "scalers", file), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok || (spec.Name.Name != "redisStreamsMetadata" && spec.Name.Name != "redisConnectionInfo") {
				return true
			}
			for _, field := range spec.Type.(*ast.StructType).Fields.List {
				if field.Tag != nil {
					tag, _ := strconv.Unquote(field.Tag.Value)
					addKedaTag(params, reflect.StructTag(tag).Get("keda"))
				}
			}
			return false
		})
	}
	return params
}

// addKedaTag adds the names of a keda struct tag ("name=address;addresses, order=triggerMetadata;authParams")
// to params, each with its sources.
func addKedaTag(params map[string][]string, tag string) {
	var names, order []string
	for _, part := range strings.Split(tag, ",") {
		key, value, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch key {
		case "name":
			names = strings.Split(value, ";")
		case "order":
			order = strings.Split(value, ";")
		}
	}
	for _, name := range names {
		params[name] = append(params[name], order...)
	}
}
