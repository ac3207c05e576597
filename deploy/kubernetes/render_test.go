package kubernetes

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
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

// base is a rendered kustomization, each kind at most once, decoded into its API type.
type base struct {
	deployment     appsv1.Deployment
	service        corev1.Service
	pdb            policyv1.PodDisruptionBudget
	networkPolicy  networkingv1.NetworkPolicy
	serviceMonitor monitoringv1.ServiceMonitor
	prometheusRule monitoringv1.PrometheusRule
	scaledObject   kedav1alpha1.ScaledObject
	triggerAuth    kedav1alpha1.TriggerAuthentication
	hpa            autoscalingv2.HorizontalPodAutoscaler // components/hpa's, in place of the two above
}

// kind is a kind of object a kustomization may hold: its API version and where it decodes to.
type kind struct {
	apiVersion string
	into       any
}

// baseKinds are the kinds the base holds; withoutKEDA those of an overlay with components/hpa.
var (
	baseKinds   = []string{"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor", "PrometheusRule", "ScaledObject", "TriggerAuthentication"}
	withoutKEDA = []string{"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor", "PrometheusRule", "HorizontalPodAutoscaler"}
)

// kinds are the objects a kustomization here may hold.
func (b *base) kinds() map[string]kind {
	return map[string]kind{
		"Deployment":              {"apps/v1", &b.deployment},
		"Service":                 {"v1", &b.service},
		"PodDisruptionBudget":     {"policy/v1", &b.pdb},
		"NetworkPolicy":           {"networking.k8s.io/v1", &b.networkPolicy},
		"ServiceMonitor":          {"monitoring.coreos.com/v1", &b.serviceMonitor},
		"PrometheusRule":          {"monitoring.coreos.com/v1", &b.prometheusRule},
		"ScaledObject":            {"keda.sh/v1alpha1", &b.scaledObject},
		"TriggerAuthentication":   {"keda.sh/v1alpha1", &b.triggerAuth},
		"HorizontalPodAutoscaler": {"autoscaling/v2", &b.hpa},
	}
}

// render builds the base; see renderDir.
func render(t *testing.T) *base { return renderDir(t, ".", baseKinds) }

// renderDir builds the kustomization in dir with kustomize, as kubectl apply -k does, wants exactly one
// object of each of the kinds want, and decodes each strictly: an unknown or misspelt field, a duplicate key
// or a value of the wrong type fails the test.
func renderDir(t *testing.T, dir string, want []string) *base {
	t.Helper()
	objects, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b := &base{}
	kinds, seen := b.kinds(), map[string]bool{}
	for _, r := range objects.Resources() {
		k, ok := kinds[r.GetKind()]
		if !ok || seen[r.GetKind()] || !slices.Contains(want, r.GetKind()) {
			t.Fatalf("%s renders a %s %s: want exactly one of each of %v", dir, r.GetKind(), r.GetName(), want)
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
	if len(seen) != len(want) {
		t.Fatalf("%s renders %v, want %v", dir, slices.Sorted(maps.Keys(seen)), slices.Sorted(slices.Values(want)))
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
	var hpa types.Kustomization
	if err := yaml.UnmarshalStrict(read(t, "components/hpa/kustomization.yaml"), &hpa); err != nil || hpa.Kind != types.ComponentKind {
		t.Fatalf("components/hpa/kustomization.yaml: %v, kind %s: want a Component", err, hpa.Kind)
	}
	files, _ = filepath.Glob("components/hpa/*.yaml")
	for _, f := range files {
		if f := filepath.Base(f); f != "kustomization.yaml" && !slices.Contains(hpa.Resources, f) {
			t.Errorf("components/hpa/%s is not in the component's resources", f)
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
