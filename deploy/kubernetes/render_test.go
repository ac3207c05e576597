package kubernetes

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// base is the rendered base, each kind once, decoded into its API type.
type base struct {
	deployment     appsv1.Deployment
	service        corev1.Service
	pdb            policyv1.PodDisruptionBudget
	hpa            autoscalingv2.HorizontalPodAutoscaler
	networkPolicy  networkingv1.NetworkPolicy
	serviceMonitor monitoringv1.ServiceMonitor
}

// kinds are the objects the base holds, each with its API version and where it decodes to.
func (b *base) kinds() map[string]struct {
	apiVersion string
	into       any
} {
	type kind = struct {
		apiVersion string
		into       any
	}
	return map[string]kind{
		"Deployment":              {"apps/v1", &b.deployment},
		"Service":                 {"v1", &b.service},
		"PodDisruptionBudget":     {"policy/v1", &b.pdb},
		"HorizontalPodAutoscaler": {"autoscaling/v2", &b.hpa},
		"NetworkPolicy":           {"networking.k8s.io/v1", &b.networkPolicy},
		"ServiceMonitor":          {"monitoring.coreos.com/v1", &b.serviceMonitor},
	}
}

// render builds the base with kustomize, as kubectl apply -k does, and decodes each object strictly: an
// unknown or misspelt field, a duplicate key or a value of the wrong type fails the test.
func render(t *testing.T) *base {
	t.Helper()
	objects, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	b := &base{}
	kinds, seen := b.kinds(), map[string]bool{}
	for _, r := range objects.Resources() {
		k, ok := kinds[r.GetKind()]
		if !ok || seen[r.GetKind()] {
			t.Fatalf("the base renders a %s %s: want exactly one of each of %v", r.GetKind(), r.GetName(), slices.Sorted(maps.Keys(kinds)))
		}
		seen[r.GetKind()] = true
		if r.GetApiVersion() != k.apiVersion {
			t.Errorf("%s %s is %s, want %s", r.GetKind(), r.GetName(), r.GetApiVersion(), k.apiVersion)
		}
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(y, k.into); err != nil {
			t.Errorf("%s %s does not decode strictly: %v", r.GetKind(), r.GetName(), err)
		}
	}
	if len(seen) != len(kinds) {
		t.Fatalf("the base renders %v, want %v", slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(kinds)))
	}
	return b
}

func TestEveryManifestIsInTheKustomizationAndDecodesStrictly(t *testing.T) {
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(read(t, "kustomization.yaml"), &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(k.Resources, f) {
			t.Errorf("%s is not in kustomization.yaml's resources: kubectl apply -k would leave it out", f)
		}
	}
	render(t)
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// container is the worker's container of the Deployment.
func (b *base) container(t *testing.T) corev1.Container {
	t.Helper()
	cs := b.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "worker" {
		t.Fatalf("the Deployment's containers are %d, want one named worker", len(cs))
	}
	return cs[0]
}

// env is the container's environment: the plain values, and the names of those taken from elsewhere.
func env(c corev1.Container) (values map[string]string, names []string) {
	values = map[string]string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
		if e.ValueFrom == nil {
			values[e.Name] = e.Value
		}
	}
	return values, names
}

// matches reports whether selector selects labels.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// changelogVersion is the newest release CHANGELOG.md names.
func changelogVersion(t *testing.T) string {
	t.Helper()
	for _, line := range strings.Split(string(read(t, "../../CHANGELOG.md")), "\n") {
		if v, ok := strings.CutPrefix(line, "## ["); ok && v[0] >= '0' && v[0] <= '9' {
			return v[:strings.Index(v, "]")]
		}
	}
	t.Fatal("CHANGELOG.md names no release")
	return ""
}
