package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomization.yaml the tests read.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewTag  string `json:"newTag"`
		NewName string `json:"newName,omitempty"`
	} `json:"images"`
}

// manifests is every object the kustomization lists, decoded.
type manifests struct {
	namespace    string
	statefulSets []*appsv1.StatefulSet
	services     map[string]*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	jobs         []*batchv1.Job
	configMaps   map[string]*corev1.ConfigMap
	policies     []*networkingv1.NetworkPolicy
}

// strict decodes doc into v, refusing a field v's type does not have.
func strict(doc []byte, v any) error { return yaml.UnmarshalStrict(doc, v) }

func load(t *testing.T) *manifests {
	t.Helper()
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := strict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	m := &manifests{namespace: k.Namespace, services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(k.Resources, f) {
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
	}
	for _, f := range k.Resources {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var tm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			want, obj := map[string]string{
				"Namespace": "v1", "ConfigMap": "v1", "Service": "v1", "StatefulSet": "apps/v1",
				"PodDisruptionBudget": "policy/v1", "Job": "batch/v1", "NetworkPolicy": "networking.k8s.io/v1",
			}[tm.Kind], any(nil)
			if want == "" || tm.APIVersion != want {
				t.Fatalf("%s, document %d: %s %s is not a kind these manifests use", f, i+1, tm.APIVersion, tm.Kind)
			}
			switch tm.Kind {
			case "Namespace":
				obj = &corev1.Namespace{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			case "Service":
				obj = &corev1.Service{}
			case "StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			case "Job":
				obj = &batchv1.Job{}
			case "NetworkPolicy":
				obj = &networkingv1.NetworkPolicy{}
			}
			if err := strict(doc, obj); err != nil {
				t.Fatalf("%s, document %d (%s): %v", f, i+1, tm.Kind, err)
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				if o.Name != k.Namespace {
					t.Errorf("namespace %s, the kustomization's is %s", o.Name, k.Namespace)
				}
			case *corev1.ConfigMap:
				m.configMaps[o.Name] = o
			case *corev1.Service:
				m.services[o.Name] = o
			case *appsv1.StatefulSet:
				m.statefulSets = append(m.statefulSets, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			case *batchv1.Job:
				m.jobs = append(m.jobs, o)
			case *networkingv1.NetworkPolicy:
				m.policies = append(m.policies, o)
			}
		}
	}
	if len(k.Images) != 1 || k.Images[0].Name != "qmq" {
		t.Fatalf("kustomization.yaml's images: %+v, want the one image qmq", k.Images)
	}
	return m
}

// flags is a container's arguments as flag → value ("" for a switch).
func flags(args []string) map[string]string {
	f := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
			f[k] = v
		} else if strings.HasPrefix(a, "--") {
			f[a] = ""
		}
	}
	return f
}

// imageUID is the user of deploy/Dockerfile (and deploy/image's config).
func imageUID(t *testing.T) int64 {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("deploy/Dockerfile has no numeric USER line")
	}
	var uid int64
	fmt.Sscan(string(m[1]), &uid)
	return uid
}

// groupOf is the Raft group a StatefulSet's nodes belong to, by its
// command: meta, or the broker's --broker-group.
func groupOf(c *corev1.Container) string {
	if c.Args[0] == "meta" {
		return "meta"
	}
	return flags(c.Args)["--broker-group"]
}

func TestManifests(t *testing.T) {
	m := load(t)
	uid := imageUID(t)
	if len(m.statefulSets) != 6 || len(m.jobs) != 1 || len(m.pdbs) != 3 {
		t.Fatalf("%d StatefulSets, %d Jobs, %d PodDisruptionBudgets: want 6, 1, 3", len(m.statefulSets), len(m.jobs), len(m.pdbs))
	}
	env := m.configMaps["qmq-env"]
	if env == nil {
		t.Fatal("no ConfigMap qmq-env")
	}
	if env.Data["QMQ_AUTH"] != "true" || env.Data["QMQ_TLS_CLIENT_AUTH"] != "require" {
		t.Errorf("qmq-env: QMQ_AUTH %q, QMQ_TLS_CLIENT_AUTH %q: want true and require", env.Data["QMQ_AUTH"], env.Data["QMQ_TLS_CLIENT_AUTH"])
	}
	tlsDir := filepath.Dir(env.Data["QMQ_TLS_CERT"])
	for _, k := range []string{"QMQ_TLS_KEY", "QMQ_TLS_CA"} {
		if filepath.Dir(env.Data[k]) != tlsDir {
			t.Errorf("qmq-env: %s %s is not in %s", k, env.Data[k], tlsDir)
		}
	}
	seeds := map[string]int{}
	podsOf := map[string][]string{} // group → pod names
	for _, s := range m.statefulSets {
		t.Run(s.Name, func(t *testing.T) {
			checkStatefulSet(t, m, s, uid, tlsDir)
		})
		c := &s.Spec.Template.Spec.Containers[0]
		g := groupOf(c)
		_, boot := flags(c.Args)["--bootstrap"]
		// Two StatefulSets of a group rolled at once could restart two of its
		// three nodes together: the seed's waits for its pod's deletion.
		if want := map[bool]appsv1.StatefulSetUpdateStrategyType{true: appsv1.OnDeleteStatefulSetStrategyType, false: appsv1.RollingUpdateStatefulSetStrategyType}[boot]; s.Spec.UpdateStrategy.Type != want {
			t.Errorf("%s: updateStrategy %q, want %s", s.Name, s.Spec.UpdateStrategy.Type, want)
		}
		if boot {
			seeds[g]++
			if *s.Spec.Replicas != 1 {
				t.Errorf("%s bootstraps with %d replicas: every one would make a group of its own", s.Name, *s.Spec.Replicas)
			}
		}
		for i := range *s.Spec.Replicas {
			podsOf[g] = append(podsOf[g], fmt.Sprintf("%s-%d", s.Name, i))
		}
	}
	for g, pods := range podsOf {
		if seeds[g] != 1 {
			t.Errorf("group %s has %d bootstrapping StatefulSets, want 1", g, seeds[g])
		}
		if len(pods) != 3 {
			t.Errorf("group %s has %d nodes, want 3", g, len(pods))
		}
	}
	checkServices(t, m)
	checkPDBs(t, m)
	checkJoin(t, m, podsOf)
}

func checkStatefulSet(t *testing.T, m *manifests, s *appsv1.StatefulSet, uid int64, tlsDir string) {
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: want Parallel (an ordered start waits for a pod that is ready only once joined)", s.Spec.PodManagementPolicy)
	}
	hs := m.services[s.Spec.ServiceName]
	if hs == nil || hs.Spec.ClusterIP != corev1.ClusterIPNone || !hs.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %s: want a headless service that publishes not-ready addresses", s.Spec.ServiceName)
	} else if !selects(hs.Spec.Selector, s.Spec.Template.Labels) {
		t.Errorf("the headless service %s does not select the pods", hs.Name)
	}
	if !selects(s.Spec.Selector.MatchLabels, s.Spec.Template.Labels) {
		t.Error("the selector does not match the template's labels")
	}
	p := s.Spec.Template.Spec
	if sc := p.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != uid ||
		sc.FSGroup == nil || *sc.FSGroup != uid {
		t.Errorf("pod securityContext: want runAsNonRoot, runAsUser and fsGroup %d (the image's user)", uid)
	}
	if p.TerminationGracePeriodSeconds == nil || *p.TerminationGracePeriodSeconds < 60 {
		t.Error("terminationGracePeriodSeconds: want at least 60 (a leader's handover on SIGTERM and a clean close)")
	}
	if len(p.Containers) != 1 {
		t.Fatalf("%d containers, want qmqd alone", len(p.Containers))
	}
	c := p.Containers[0]
	if c.Image != "qmq:devel" || len(c.Command) != 0 {
		t.Errorf("image %q, command %q: want qmq:devel and its entrypoint (qmqd)", c.Image, c.Command)
	}
	f := flags(c.Args)
	for _, k := range []string{"--id", "--data", "--listen", "--advertise", "--raft", "--raft-advertise", "--http"} {
		if f[k] == "" {
			t.Errorf("no %s", k)
		}
	}
	if f["--id"] != "$(POD_NAME)" {
		t.Errorf("--id %s: want the pod's name", f["--id"])
	}
	if _, ok := f["--open-http"]; !ok {
		t.Error("no --open-http: the kubelet's probes present no client certificate")
	}
	if _, ok := f["--insecure"]; ok {
		t.Error("--insecure")
	}
	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		t.Errorf("no container port %s", name)
		return 0
	}
	// The node advertises its pod's DNS name under the headless service
	// that governs its StatefulSet, for clients and for Raft: its group
	// records the name and resolves it at every dial, so the pod is found
	// under it whatever its IP.
	name := podDNSName("$(POD_NAME)", s.Spec.ServiceName)
	for flag, want := range map[string]string{
		"--advertise":      fmt.Sprintf("%s:%d", name, port("client")),
		"--raft-advertise": fmt.Sprintf("%s:%d", name, port("raft")),
	} {
		if f[flag] != want {
			t.Errorf("%s %s: want the pod's name under its headless service %s, %s", flag, f[flag], s.Spec.ServiceName, want)
		}
	}
	// The client and HTTP ports on every address of the pod (the probes
	// dial its IP, kubectl port-forward its loopback); Raft on its IP, the
	// address it dials its peers from.
	for flag, want := range map[string]string{
		"--listen": fmt.Sprintf("0.0.0.0:%d", port("client")),
		"--http":   fmt.Sprintf("0.0.0.0:%d", port("http")),
		"--raft":   fmt.Sprintf("$(POD_IP):%d", port("raft")),
	} {
		if f[flag] != want {
			t.Errorf("%s %s: want %s", flag, f[flag], want)
		}
	}
	checkProbe := func(what string, pr *corev1.Probe, path string) {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != path || pr.HTTPGet.Port.String() != "http" || pr.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s: want an HTTPS GET of %s on the port http", what, path)
		}
	}
	checkProbe("readinessProbe", c.ReadinessProbe, "/readyz")
	checkProbe("livenessProbe", c.LivenessProbe, "/healthz")
	checkProbe("startupProbe", c.StartupProbe, "/healthz")
	if pr := c.StartupProbe; pr != nil && pr.PeriodSeconds*pr.FailureThreshold < 300 {
		t.Errorf("startupProbe: %d s before the liveness probe takes over; want at least 300 (a large node's start)", pr.PeriodSeconds*pr.FailureThreshold)
	}
	// qmqd hands leadership over on SIGTERM, when it leads; a preStop
	// cannot ask whether its pod leads, so a hook would move leadership
	// away from the leader when a follower stops too.
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Error("preStop: want none (qmqd hands leadership over itself on SIGTERM, when it leads)")
	}
	envs := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		envs[e.Name] = e
	}
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_IP": "status.podIP"} {
		if e := envs[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("env %s: want the downward API's %s", name, path)
		}
	}
	if envs["QMQ_SERVER"].Value != f["--advertise"] {
		t.Errorf("QMQ_SERVER %q (qmqctl run in the pod): want the node's own --advertise %s", envs["QMQ_SERVER"].Value, f["--advertise"])
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "qmq-env" {
		t.Error("envFrom: want the ConfigMap qmq-env")
	}
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().Cmp(*r.Requests.Memory()) < 0 {
		t.Errorf("resources %v: want CPU and memory requests and a memory limit above them", r)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Error("container securityContext: want no privilege escalation, a read-only root, every capability dropped")
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm
	}
	if len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "data" ||
		s.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().IsZero() {
		t.Error("volumeClaimTemplates: want one, data, with a size")
	}
	if vm, ok := mounts["data"]; !ok || vm.MountPath != "/var/lib/qmq" || !strings.HasPrefix(f["--data"], vm.MountPath+"/") {
		t.Errorf("the volume data: want it at the image's /var/lib/qmq, --data (%s) in it", f["--data"])
	}
	if vm, ok := mounts["tls"]; !ok || vm.MountPath != tlsDir || !vm.ReadOnly {
		t.Errorf("the volume tls: want it read-only at %s", tlsDir)
	}
	secret := false
	for _, v := range p.Volumes {
		if v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "qmq-tls" {
			secret = true
		}
	}
	if !secret {
		t.Error("the volume tls: want the Secret qmq-tls")
	}
}

// podDNSName is the DNS name a pod of a StatefulSet governed by the
// headless service svc has, in the pod's namespace: POD.SVC.NAMESPACE.svc.cluster.local.
func podDNSName(pod, svc string) string {
	return pod + "." + svc + ".$(POD_NAMESPACE).svc.cluster.local"
}

// checkServices checks that the only services are the headless ones that
// govern the StatefulSets: a node's address is its pod's name under one,
// so no other service (a cluster IP a pod) is needed.
func checkServices(t *testing.T, m *manifests) {
	governing := map[string]bool{}
	for _, s := range m.statefulSets {
		governing[s.Spec.ServiceName] = true
	}
	for name, svc := range m.services {
		if !governing[name] || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("service %s (cluster IP %q): want only the headless services governing the StatefulSets; the nodes are addressed by their pods' names under those", name, svc.Spec.ClusterIP)
		}
	}
}

// selects reports whether every label of sel is in labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkPDBs(t *testing.T, m *manifests) {
	byGroup := map[string]int{}
	for _, s := range m.statefulSets {
		n := 0
		for _, p := range m.pdbs {
			if selects(p.Spec.Selector.MatchLabels, s.Spec.Template.Labels) {
				n++
				if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 || p.Spec.MinAvailable != nil {
					t.Errorf("PodDisruptionBudget %s: want maxUnavailable 1", p.Name)
				}
				// It must cover the whole group, every StatefulSet of it.
				for _, o := range m.statefulSets {
					if groupOf(&o.Spec.Template.Spec.Containers[0]) == groupOf(&s.Spec.Template.Spec.Containers[0]) &&
						!selects(p.Spec.Selector.MatchLabels, o.Spec.Template.Labels) {
						t.Errorf("PodDisruptionBudget %s covers %s but not %s of the same group", p.Name, s.Name, o.Name)
					}
				}
			}
		}
		if n != 1 {
			t.Errorf("%s is covered by %d PodDisruptionBudgets, want 1", s.Name, n)
		}
		byGroup[groupOf(&s.Spec.Template.Spec.Containers[0])]++
	}
	if len(byGroup) != len(m.pdbs) {
		t.Errorf("%d groups, %d PodDisruptionBudgets", len(byGroup), len(m.pdbs))
	}
}

// checkJoin checks that the Job joins every node that does not bootstrap,
// once, with the addresses the node reports: exactly its --raft-advertise
// and its --advertise, its pod's DNS name, with $(POD_NAMESPACE) the same
// field of the downward API in the Job as in the pod.
func checkJoin(t *testing.T, m *manifests, podsOf map[string][]string) {
	j := m.jobs[0]
	if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Error("the Job's restartPolicy: want OnFailure (a join is retried until the group's leader and the node answer)")
	}
	nodes := map[string]*corev1.Container{} // pod → its qmqd container
	sets := map[string]*appsv1.StatefulSet{}
	for _, s := range m.statefulSets {
		for i := range *s.Spec.Replicas {
			pod := fmt.Sprintf("%s-%d", s.Name, i)
			nodes[pod] = &s.Spec.Template.Spec.Containers[0]
			sets[pod] = s
		}
	}
	joined := map[string]bool{}
	for _, c := range j.Spec.Template.Spec.Containers {
		if !slices.Equal(c.Command, []string{"qmqctl"}) || len(c.Args) < 3 || c.Args[0] != "--server" || c.Args[2] != "join" {
			t.Errorf("container %s: want qmqctl --server META join …", c.Name)
			continue
		}
		jf := map[string]string{}
		for i := 3; i+1 < len(c.Args); i += 2 {
			jf[c.Args[i]] = c.Args[i+1]
		}
		pod := jf["--id"]
		node := nodes[pod]
		if node == nil {
			t.Errorf("container %s joins %s, which no StatefulSet makes", c.Name, pod)
			continue
		}
		joined[pod] = true
		nf := flags(node.Args)
		if _, ok := nf["--bootstrap"]; ok {
			t.Errorf("container %s joins %s, which bootstraps", c.Name, pod)
		}
		expand := strings.NewReplacer("$(POD_NAME)", pod)
		if jf["--broker-group"] != groupOf(node) || jf["--addr"] != expand.Replace(nf["--advertise"]) {
			t.Errorf("container %s: --broker-group %s --addr %s, want %s and %s", c.Name, jf["--broker-group"], jf["--addr"], groupOf(node), expand.Replace(nf["--advertise"]))
		}
		if want := expand.Replace(nf["--raft-advertise"]); jf["--raft"] != want {
			t.Errorf("container %s: --raft %s: want %s's --raft-advertise, %s (join requires the Raft address the node reports)", c.Name, jf["--raft"], pod, want)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
		}) {
			t.Errorf("container %s: env POD_NAMESPACE: want the downward API's metadata.namespace, as in the pods", c.Name)
		}
		var metas []string
		for _, p := range podsOf["meta"] {
			metas = append(metas, strings.NewReplacer("$(POD_NAME)", p).Replace(flags(nodes[p].Args)["--advertise"]))
		}
		if c.Args[1] != strings.Join(metas, ",") {
			t.Errorf("container %s: --server %s, want every metaserver node: %s", c.Name, c.Args[1], strings.Join(metas, ","))
		}
		if b := node.Args; b[0] == "broker" && flags(b)["--meta"] != c.Args[1] {
			t.Errorf("%s's --meta %s differs from the join's --server %s", pod, flags(b)["--meta"], c.Args[1])
		}
	}
	for pod, node := range nodes {
		if _, boot := flags(node.Args)["--bootstrap"]; !boot && !joined[pod] {
			t.Errorf("nothing joins %s", pod)
		}
	}
}
