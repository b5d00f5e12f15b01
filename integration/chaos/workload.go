package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// workloadManager is the field manager of the workload's own writes (annotations of
// InferenceServices and WorkloadClusters); map specs are written as OME's routing controller.
const workloadManager = "chaos-workload"

// workloadClusters is OME's WorkloadCluster (cluster-scoped), whose taints live in annTaints.
var workloadClusters = schema.GroupVersionResource{Group: "ome.io", Version: "v1beta1", Resource: "workloadclusters"}

// workloadConfig is what the workload runs against.
type workloadConfig struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	OME     omeclient.Interface
	// Namespace holds the chaos maps ("chaos"); Rival is another namespace whose maps claim
	// the chaos maps' hostnames ("rival").
	Namespace, Rival string
	// Maps is how many chaos maps there are; Clusters the entries of each (worker-0 ...),
	// for which WorkloadClusters are created.
	Maps, Clusters int
	// RNG chooses every operation: a run is deterministic for a seed, apart from timing.
	RNG *rand.Rand
	// Bin is the publisher binary and Kubeconfig a kubeconfig for it, for the ramps
	// (`publisher drain/undrain --ramp`).
	Bin, Kubeconfig string
	// FleetEvery is the fewest steps between two fleet-wide operations (taint, untaint: a
	// cluster's taints move every map with an entry there); in between, Step draws from the
	// other kinds only, with their weights. 0: no limit, the fleet-wide kinds are drawn like
	// the others.
	FleetEvery int
	// Endpoint is the endpoint URL of a map's entry for a cluster (nil: a made-up
	// https://MAP.CLUSTER.example.com, never dialled).
	Endpoint func(mapName, cluster string) string
	// Kinds are the operation kinds Step draws from (nil: every kind of operations).
	Kinds []string
}

// mapState is what the workload knows of one chaos map and its InferenceService.
type mapState struct {
	ref     mapRef
	weights []int32 // the automatic weight of each cluster (OME's routing controller's)
	deleted bool    // the map was deleted and is to be created again
	// drains is the last valid drain annotation written (ID -> cluster).
	drains map[string]string
	// bad is the annotation holding a malformed value ("" none), badValue that value.
	bad, badValue string
	host          string // ome.io/global-host, "" none
	tolerations   string // the tolerations annotation, "" none
}

// rivalMap is a map of the rival namespace claiming a chaos map's hostname.
type rivalMap struct{ name, host string }

// taint is one taint of a workload cluster.
type taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// workload runs randomized operations on the chaos maps (drains, undrains, taints,
// tolerations, ramps, hostnames, deletions, malformed inputs) and the rival namespace.
// Setup, Step and Settle are called from one goroutine; Maps and Ops are safe at any time.
type workload struct {
	cfg    workloadConfig
	refs   []mapRef
	maps   []*mapState
	taints [][]taint // per cluster index
	rivals []rivalMap
	seq    int // for fresh IDs and names
	// steps counts the calls of Step, lastFleet is the step of the last fleet-wide
	// operation tried (cfg.FleetEvery).
	steps, lastFleet int

	mu  sync.Mutex
	ops map[string]int
}

// newWorkload returns a workload over cfg; the maps' weights are drawn from cfg.RNG.
func newWorkload(cfg workloadConfig) *workload {
	w := &workload{cfg: cfg, taints: make([][]taint, cfg.Clusters), ops: map[string]int{}}
	clusters := make([]string, cfg.Clusters)
	for j := range clusters {
		clusters[j] = clusterName(j)
	}
	for i := range cfg.Maps {
		name := fmt.Sprintf("svc-%04d", i)
		ref := mapRef{Namespace: cfg.Namespace, Name: name, Service: name, Clusters: clusters,
			Hostname: templateHost(name, cfg.Namespace), Endpoints: map[string]string{}}
		for _, c := range clusters {
			ref.Endpoints[c] = entryEndpoint(name, c)
		}
		st := &mapState{ref: ref, drains: map[string]string{}}
		for range clusters {
			st.weights = append(st.weights, int32(1+cfg.RNG.IntN(10)))
		}
		w.maps = append(w.maps, st)
		w.refs = append(w.refs, st.ref)
	}
	return w
}

func clusterName(j int) string { return fmt.Sprintf("worker-%d", j) }

// entryEndpoint is the endpoint URL of the entry for cluster of map name.
func entryEndpoint(name, cluster string) string {
	return fmt.Sprintf("https://%s.%s.example.com", name, cluster)
}

// Maps returns every chaos map; names are stable (a deleted map is created again under its
// name later). The slice is shared: do not modify it.
func (w *workload) Maps() []mapRef { return w.refs }

// Ops returns the operations done so far, by kind (a copy).
func (w *workload) Ops() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.ops)
}

func (w *workload) count(kind string) {
	w.mu.Lock()
	w.ops[kind]++
	w.mu.Unlock()
}

func (w *workload) fresh(prefix string) string {
	w.seq++
	return fmt.Sprintf("%s-%d", prefix, w.seq)
}

// Setup creates the namespaces, the WorkloadClusters, and every map's InferenceService and
// TrafficMap. Objects that exist already are kept.
func (w *workload) Setup(ctx context.Context) error {
	for _, ns := range []string{w.cfg.Namespace, w.cfg.Rival} {
		_, err := w.cfg.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	for j := range w.cfg.Clusters {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "ome.io/v1beta1", "kind": "WorkloadCluster",
			"metadata": map[string]any{"name": clusterName(j)}, "spec": map[string]any{},
		}}
		if _, err := w.cfg.Dynamic.Resource(workloadClusters).Create(ctx, u, metav1.CreateOptions{FieldManager: workloadManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create workloadcluster %s: %w", clusterName(j), err)
		}
	}
	for _, st := range w.maps {
		if err := w.createService(ctx, st.ref.Namespace, st.ref.Service, ""); err != nil {
			return err
		}
		if err := w.createMap(ctx, st); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// createService creates an InferenceService eligible for routing (spec.placement), with
// the hostname annotation when host is set.
func (w *workload) createService(ctx context.Context, ns, name, host string) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"placement": map[string]any{"mode": "All", "clusterSelector": map[string]any{}}},
	}}
	if host != "" {
		u.SetAnnotations(map[string]string{v1beta1.AnnotationGlobalHost: host})
	}
	_, err := w.cfg.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{FieldManager: workloadManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create inferenceservice %s/%s: %w", ns, name, err)
	}
	return nil
}

// createMap creates the map with the entries OME's routing controller would write for the
// workload's drains. An AlreadyExists error is returned as it is (a deleted map that is
// still finalizing).
func (w *workload) createMap(ctx context.Context, st *mapState) error {
	tm := &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: st.ref.Name, Namespace: st.ref.Namespace},
		Spec:       v1beta1.TrafficMapSpec{Service: st.ref.Service, Mode: v1beta1.PlacementModeAll, ObservedISVCGeneration: 1},
	}
	routeEntries(st, &tm.Spec, w.cfg.Endpoint)
	_, err := w.cfg.OME.OmeV1beta1().TrafficMaps(st.ref.Namespace).Create(ctx, tm, metav1.CreateOptions{FieldManager: v1beta1.RoutingFieldManager})
	if err != nil {
		return fmt.Errorf("create trafficmap %s: %w", st.ref.Key(), err)
	}
	return nil
}

// routeEntries sets spec's entries as OME's routing controller computes them: the automatic
// weight, or 0 with the drain IDs in drainRefs for a drained cluster.
func routeEntries(st *mapState, spec *v1beta1.TrafficMapSpec, endpoint func(mapName, cluster string) string) {
	spec.Entries = spec.Entries[:0]
	for j, c := range st.ref.Clusters {
		e := v1beta1.TrafficMapEntry{Cluster: c, Weight: st.weights[j], Healthy: true,
			Endpoint: entryEndpoint(st.ref.Name, c)}
		if endpoint != nil {
			e.Endpoint = endpoint(st.ref.Name, c)
		}
		for _, id := range slices.Sorted(maps.Keys(st.drains)) {
			if st.drains[id] == c {
				e.DrainRefs = append(e.DrainRefs, id)
			}
		}
		if len(e.DrainRefs) > 0 {
			e.Weight = 0
		}
		spec.Entries = append(spec.Entries, e)
	}
}

// syncRouting brings the map's entries in line with the workload's drains, as OME's routing
// controller does after a drain annotation change. A deleted map is skipped.
func (w *workload) syncRouting(ctx context.Context, st *mapState) error {
	tms := w.cfg.OME.OmeV1beta1().TrafficMaps(st.ref.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tm, err := tms.Get(ctx, st.ref.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if tm.DeletionTimestamp != nil {
			return nil
		}
		want := tm.DeepCopy()
		routeEntries(st, &want.Spec, w.cfg.Endpoint)
		if equalEntries(tm.Spec.Entries, want.Spec.Entries) {
			return nil
		}
		_, err = tms.Update(ctx, want, metav1.UpdateOptions{FieldManager: v1beta1.RoutingFieldManager})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update trafficmap %s spec: %w", st.ref.Key(), err)
	}
	return nil
}

func equalEntries(a, b []v1beta1.TrafficMapEntry) bool {
	return slices.EqualFunc(a, b, func(x, y v1beta1.TrafficMapEntry) bool {
		return x.Cluster == y.Cluster && x.Weight == y.Weight && x.Endpoint == y.Endpoint && slices.Equal(x.DrainRefs, y.DrainRefs)
	})
}

// updateAnnotations changes the annotations of an InferenceService (Get, change, Update,
// retried on conflict). change returns false to write nothing.
func (w *workload) updateAnnotations(ctx context.Context, ns, name string, change func(ann map[string]string) bool) error {
	res := w.cfg.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		if !change(ann) {
			return nil
		}
		u.SetAnnotations(ann)
		_, err = res.Update(ctx, u, metav1.UpdateOptions{FieldManager: workloadManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("update inferenceservice %s/%s annotations: %w", ns, name, err)
	}
	return nil
}

// setDrains writes st.drains as the drain annotation (removed when empty) unless a malformed
// value is in place.
func (w *workload) setDrains(ctx context.Context, st *mapState) error {
	return w.updateAnnotations(ctx, st.ref.Namespace, st.ref.Service, func(ann map[string]string) bool {
		if st.bad == annDrain {
			return false
		}
		setOrDelete(ann, annDrain, encodeDrains(st.drains))
		return true
	})
}

// encodeDrains is the drain annotation for drains (ID -> cluster), as `ome drain` writes it.
func encodeDrains(drains map[string]string) string {
	if len(drains) == 0 {
		return ""
	}
	out := map[string]map[string]string{}
	for id, c := range drains {
		out[id] = map[string]string{"cluster": c, "reason": "chaos " + id}
	}
	b, _ := json.Marshal(out) // strings only: cannot fail
	return string(b)
}

// setTaints writes the cluster's taints annotation (removed when none) by merge patch.
func (w *workload) setTaints(ctx context.Context, j int) error {
	var v any
	if len(w.taints[j]) > 0 {
		b, _ := json.Marshal(w.taints[j]) // strings only: cannot fail
		v = string(b)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annTaints: v}}})
	_, err := w.cfg.Dynamic.Resource(workloadClusters).Patch(ctx, clusterName(j), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: workloadManager})
	if err != nil {
		return fmt.Errorf("patch workloadcluster %s taints: %w", clusterName(j), err)
	}
	return nil
}

// runCLI runs the publisher's operator command args; exit code 3 (the guarded patch lost a
// race) is not an error: nothing was written.
func (w *workload) runCLI(ctx context.Context, args ...string) (written bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.cfg.Bin, append(args, "--kubeconfig", w.cfg.Kubeconfig)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		return false, nil
	}
	if err != nil {
		tail := stderr.String()
		if len(tail) > 500 {
			tail = tail[len(tail)-500:]
		}
		return false, fmt.Errorf("publisher %s: %w: %s", strings.Join(args[:2], " "), err, strings.TrimSpace(tail))
	}
	return true, nil
}

// operation is one kind of random operation. run reports false when it found nothing to do
// (no candidate), and then the workload picks again. fleet marks the kinds that change
// the inputs of every map at once (workloadConfig.FleetEvery).
type operation struct {
	kind   string
	weight int
	run    func(ctx context.Context, w *workload) (bool, error)
	fleet  bool
}

// operations are the kinds Step chooses from, with their relative weights.
var operations = []operation{
	{"drain", 20, opDrain, false},
	{"undrain", 16, opUndrain, false},
	{"routing", 10, opRouting, false},
	{"taint", 6, opTaint, true},
	{"untaint", 6, opUntaint, true},
	{"tolerate", 6, opTolerate, false},
	{"hostname", 6, opHostname, false},
	{"delete", 2, opDelete, false},
	{"recreate", 6, opRecreate, false},
	{"rival-claim", 2, opRivalClaim, false},
	{"rival-release", 3, opRivalRelease, false},
	{"bad-input", 3, opBadInput, false},
	{"fix", 8, opFix, false},
	{"ramp", 1, opRamp, false},
}

// Step does one random operation and returns its kind ("idle" when it found nothing to
// do). A fleet-wide kind is drawn only once cfg.FleetEvery steps have passed since the last
// one. An API error is returned as it is; the workload's view stays as before the
// operation, and the caller may go on stepping.
func (w *workload) Step(ctx context.Context) (string, error) {
	w.steps++
	fleet := w.cfg.FleetEvery <= 0 || w.steps-w.lastFleet >= w.cfg.FleetEvery
	var ops []operation
	total := 0
	for _, op := range operations {
		if (fleet || !op.fleet) && w.does(op.kind) {
			ops = append(ops, op)
			total += op.weight
		}
	}
	for range 8 {
		n := w.cfg.RNG.IntN(total)
		op := ops[0]
		for _, o := range ops {
			if n < o.weight {
				op = o
				break
			}
			n -= o.weight
		}
		done, err := op.run(ctx, w)
		if op.fleet && (done || err != nil) {
			w.lastFleet = w.steps
		}
		if err != nil {
			return op.kind, err
		}
		if done {
			w.count(op.kind)
			return op.kind, nil
		}
	}
	return "idle", nil
}

// does reports whether the workload makes operations of kind (workloadConfig.Kinds).
func (w *workload) does(kind string) bool {
	return w.cfg.Kinds == nil || slices.Contains(w.cfg.Kinds, kind)
}

// pickMap returns a random chaos map for which ok holds, nil when none does.
func (w *workload) pickMap(ok func(*mapState) bool) *mapState {
	var c []*mapState
	for _, st := range w.maps {
		if ok(st) {
			c = append(c, st)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[w.cfg.RNG.IntN(len(c))]
}

// maybeRoute lets OME's routing controller follow the drains now, half of the time; else a
// later "routing" operation does.
func (w *workload) maybeRoute(ctx context.Context, st *mapState) error {
	if st.deleted || w.cfg.RNG.IntN(2) == 0 {
		return nil
	}
	return w.syncRouting(ctx, st)
}

// opDrain adds a drain of a random cluster (one in ten a cluster with no entry: pending).
func opDrain(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return st.bad != annDrain && len(st.drains) < 6 })
	if st == nil {
		return false, nil
	}
	cluster := clusterName(w.cfg.RNG.IntN(w.cfg.Clusters))
	if w.cfg.RNG.IntN(10) == 0 {
		cluster = clusterName(w.cfg.Clusters)
	}
	id := w.fresh("d")
	st.drains[id] = cluster
	if err := w.setDrains(ctx, st); err != nil {
		delete(st.drains, id)
		return false, err
	}
	return true, w.maybeRoute(ctx, st)
}

// opUndrain removes one drain.
func opUndrain(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return st.bad != annDrain && len(st.drains) > 0 })
	if st == nil {
		return false, nil
	}
	ids := slices.Sorted(maps.Keys(st.drains))
	id := ids[w.cfg.RNG.IntN(len(ids))]
	cluster := st.drains[id]
	delete(st.drains, id)
	if err := w.setDrains(ctx, st); err != nil {
		st.drains[id] = cluster
		return false, err
	}
	return true, w.maybeRoute(ctx, st)
}

// opRouting is OME's routing controller catching up with a map's drains.
func opRouting(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return !st.deleted && st.bad != annDrain })
	if st == nil {
		return false, nil
	}
	return true, w.syncRouting(ctx, st)
}

// opTaint sets a taint on a random cluster (a quarter of them NoSchedule, which moves nothing).
func opTaint(ctx context.Context, w *workload) (bool, error) {
	j := w.cfg.RNG.IntN(w.cfg.Clusters)
	t := taint{Key: []string{"maintenance", "decommission", "gpu-fault"}[w.cfg.RNG.IntN(3)],
		Value: []string{"", "planned", "urgent"}[w.cfg.RNG.IntN(3)], Effect: "NoExecute"}
	if w.cfg.RNG.IntN(4) == 0 {
		t.Effect = "NoSchedule"
	}
	before := w.taints[j]
	next := slices.DeleteFunc(slices.Clone(before), func(o taint) bool { return o.Key == t.Key && o.Effect == t.Effect })
	w.taints[j] = append(next, t)
	if err := w.setTaints(ctx, j); err != nil {
		w.taints[j] = before
		return false, err
	}
	return true, nil
}

// opUntaint removes one taint.
func opUntaint(ctx context.Context, w *workload) (bool, error) {
	var tainted []int
	for j, ts := range w.taints {
		if len(ts) > 0 {
			tainted = append(tainted, j)
		}
	}
	if len(tainted) == 0 {
		return false, nil
	}
	j := tainted[w.cfg.RNG.IntN(len(tainted))]
	before := w.taints[j]
	k := w.cfg.RNG.IntN(len(before))
	w.taints[j] = slices.Delete(slices.Clone(before), k, k+1)
	if err := w.setTaints(ctx, j); err != nil {
		w.taints[j] = before
		return false, err
	}
	return true, nil
}

// tolerationValues are the tolerations a service gets ("" removes the annotation).
var tolerationValues = []string{
	"",
	`[{"key":"maintenance","operator":"Exists"}]`,
	`[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`,
	`[{"operator":"Exists"}]`,
	`[{"key":"decommission","operator":"Exists","effect":"NoSchedule"}]`,
	`[{"key":"gpu-fault","value":"urgent"},{"key":"decommission","operator":"Exists","effect":"NoExecute"}]`,
	`[]`,
}

// opTolerate sets or removes a service's tolerations.
func opTolerate(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return st.bad != annTolerations })
	if st == nil {
		return false, nil
	}
	v := tolerationValues[w.cfg.RNG.IntN(len(tolerationValues))]
	err := w.updateAnnotations(ctx, st.ref.Namespace, st.ref.Service, func(ann map[string]string) bool {
		setOrDelete(ann, annTolerations, v)
		return true
	})
	if err != nil {
		return false, err
	}
	st.tolerations = v
	return true, nil
}

// setOrDelete sets ann[key] to v, or removes key when v is "".
func setOrDelete(ann map[string]string, key, v string) {
	if v == "" {
		delete(ann, key)
	} else {
		ann[key] = v
	}
}

// opHostname gives a service a fresh ome.io/global-host, or (a third of the time, when it
// has one) removes it so that the template applies.
func opHostname(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(*mapState) bool { return true })
	if st == nil {
		return false, nil
	}
	host := ""
	if st.host == "" || w.cfg.RNG.IntN(3) > 0 {
		host = fmt.Sprintf("%s.%s.%s.example.com", w.fresh("h"), st.ref.Name, st.ref.Namespace)
	}
	err := w.updateAnnotations(ctx, st.ref.Namespace, st.ref.Service, func(ann map[string]string) bool {
		setOrDelete(ann, v1beta1.AnnotationGlobalHost, host)
		return true
	})
	if err != nil {
		return false, err
	}
	st.host = host
	return true, nil
}

// opDelete deletes a map; opRecreate creates it again later.
func opDelete(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return !st.deleted })
	if st == nil {
		return false, nil
	}
	err := w.cfg.OME.OmeV1beta1().TrafficMaps(st.ref.Namespace).Delete(ctx, st.ref.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("delete trafficmap %s: %w", st.ref.Key(), err)
	}
	st.deleted = true
	return true, nil
}

// opRecreate creates a deleted map again; nothing is done while it is still finalizing.
func opRecreate(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return st.deleted })
	if st == nil {
		return false, nil
	}
	err := w.createMap(ctx, st)
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st.deleted = false
	return true, nil
}

// opRivalClaim creates a map in the rival namespace whose service claims a chaos map's
// current hostname (at most three at a time).
func opRivalClaim(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return st.host != "" })
	if st == nil || len(w.rivals) >= 3 {
		return false, nil
	}
	name := w.fresh("rival")
	if err := w.createService(ctx, w.cfg.Rival, name, st.host); err != nil {
		return false, err
	}
	rival := &mapState{ref: mapRef{Namespace: w.cfg.Rival, Name: name, Service: name, Clusters: st.ref.Clusters}, weights: st.weights}
	w.rivals = append(w.rivals, rivalMap{name: name, host: st.host})
	if err := w.createMap(ctx, rival); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	return true, nil
}

// opRivalRelease deletes a rival map and its service.
func opRivalRelease(ctx context.Context, w *workload) (bool, error) {
	if len(w.rivals) == 0 {
		return false, nil
	}
	i := w.cfg.RNG.IntN(len(w.rivals))
	if err := w.deleteRival(ctx, w.rivals[i].name); err != nil {
		return false, err
	}
	w.rivals = slices.Delete(w.rivals, i, i+1)
	return true, nil
}

func (w *workload) deleteRival(ctx context.Context, name string) error {
	err := w.cfg.OME.OmeV1beta1().TrafficMaps(w.cfg.Rival).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete trafficmap %s/%s: %w", w.cfg.Rival, name, err)
	}
	err = w.cfg.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(w.cfg.Rival).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete inferenceservice %s/%s: %w", w.cfg.Rival, name, err)
	}
	return nil
}

// badValues are the malformed values bad-input writes, by annotation.
var badValues = map[string][]string{
	annDrain:       {`{"bad":{"cluster":"worker-0"}}`, `not json`, `{"bad":{"cluster":" worker-0","reason":"r"}}`, ``},
	annTolerations: {`[{"key":""}]`, `[{"key":"m","operator":"Exists","value":"v"}]`},
	annRamp:        {`{"worker-0":{"direction":"sideways","start":"2026-12-03T10:00:00Z","duration":"6s"}}`},
}

// opBadInput writes a malformed drain, tolerations or ramp annotation (the ramp one only
// where no ramp is under way); opFix puts the valid value back later.
func opBadInput(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return st.bad == "" })
	if st == nil {
		return false, nil
	}
	key := []string{annDrain, annDrain, annDrain, annTolerations, annRamp}[w.cfg.RNG.IntN(5)]
	value := badValues[key][w.cfg.RNG.IntN(len(badValues[key]))]
	written := false
	err := w.updateAnnotations(ctx, st.ref.Namespace, st.ref.Service, func(ann map[string]string) bool {
		if _, ramping := ann[annRamp]; key == annRamp && ramping {
			return false
		}
		ann[key], written = value, true
		return true
	})
	if err != nil || !written {
		return false, err
	}
	st.bad, st.badValue = key, value
	return true, nil
}

// opFix puts a malformed annotation's valid value back.
func opFix(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return st.bad != "" })
	if st == nil {
		return false, nil
	}
	return true, w.fix(ctx, st)
}

// fix restores the annotation bad-input broke, if it still holds the malformed value: the
// drains the workload wrote last, the tolerations it replaced, or no ramp.
func (w *workload) fix(ctx context.Context, st *mapState) error {
	err := w.updateAnnotations(ctx, st.ref.Namespace, st.ref.Service, func(ann map[string]string) bool {
		if v, ok := ann[st.bad]; !ok || v != st.badValue {
			return false
		}
		switch st.bad {
		case annDrain:
			setOrDelete(ann, annDrain, encodeDrains(st.drains))
		case annTolerations:
			setOrDelete(ann, annTolerations, st.tolerations)
		default:
			delete(ann, st.bad)
		}
		return true
	})
	if err != nil {
		return err
	}
	st.bad, st.badValue = "", ""
	return nil
}

// opRamp runs `publisher drain --ramp` (a new drain of a random cluster) or `publisher
// undrain --ramp` (of one of the map's drains) with 3 steps over 6s, without waiting.
func opRamp(ctx context.Context, w *workload) (bool, error) {
	st := w.pickMap(func(st *mapState) bool { return !st.deleted && st.bad == "" && len(st.drains) < 6 })
	if st == nil {
		return false, nil
	}
	ramp := []string{"--ramp", "6s", "--ramp-steps", "3", "--yes"}
	if len(st.drains) > 0 && w.cfg.RNG.IntN(2) == 0 {
		ids := slices.Sorted(maps.Keys(st.drains))
		id := ids[w.cfg.RNG.IntN(len(ids))]
		written, err := w.runCLI(ctx, append([]string{"undrain", st.ref.Service, "-n", st.ref.Namespace, "--id", id}, ramp...)...)
		if err != nil || !written {
			return written, err
		}
		delete(st.drains, id)
		return true, w.maybeRoute(ctx, st)
	}
	cluster, id := clusterName(w.cfg.RNG.IntN(w.cfg.Clusters)), w.fresh("r")
	written, err := w.runCLI(ctx, append([]string{"drain", st.ref.Service, "-n", st.ref.Namespace,
		"--workload-cluster", cluster, "--id", id, "--reason", "chaos ramp", "--allow-no-traffic"}, ramp...)...)
	if err != nil || !written {
		return written, err
	}
	st.drains[id] = cluster
	return true, w.maybeRoute(ctx, st)
}

// Settle writes the end state: every service's annotations as the workload last meant them
// (its drains, tolerations and hostname; malformed values fixed, ramps cleared so that their
// drains and undrains stand at once), every cluster's taints, deleted maps created again
// (waiting while one is still finalizing) with entries in line with their drains, and every
// map and service of the rival namespace deleted (a workload without taint operations
// leaves the taints alone). Writing the whole intended state, not only what is known to
// differ, also repairs a write whose answer a fault lost. It returns once all of it is
// written, or at the first error.
func (w *workload) Settle(ctx context.Context) error {
	for j := range w.taints {
		if !w.does("taint") {
			break // another workload owns the clusters' taints
		}
		if err := w.setTaints(ctx, j); err != nil {
			return err
		}
	}
	for _, st := range w.maps {
		err := w.updateAnnotations(ctx, st.ref.Namespace, st.ref.Service, func(ann map[string]string) bool {
			delete(ann, annRamp)
			setOrDelete(ann, annDrain, encodeDrains(st.drains))
			setOrDelete(ann, annTolerations, st.tolerations)
			setOrDelete(ann, v1beta1.AnnotationGlobalHost, st.host)
			return true
		})
		if err != nil {
			return err
		}
		st.bad, st.badValue = "", ""
		if err := w.recreate(ctx, st); err != nil {
			return err
		}
		if err := w.syncRouting(ctx, st); err != nil {
			return err
		}
	}
	return w.deleteRivals(ctx)
}

// deleteRivals deletes every map and service of the rival namespace (also any whose
// creation a fault made look failed).
func (w *workload) deleteRivals(ctx context.Context) error {
	tms, err := w.cfg.OME.OmeV1beta1().TrafficMaps(w.cfg.Rival).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list trafficmaps in %s: %w", w.cfg.Rival, err)
	}
	isvcs, err := w.cfg.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(w.cfg.Rival).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list inferenceservices in %s: %w", w.cfg.Rival, err)
	}
	names := map[string]bool{}
	for _, tm := range tms.Items {
		names[tm.Name] = true
	}
	for _, u := range isvcs.Items {
		names[u.GetName()] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if err := w.deleteRival(ctx, name); err != nil {
			return err
		}
	}
	w.rivals = nil
	return nil
}

// recreate creates a deleted map again, waiting while the old one is still finalizing.
func (w *workload) recreate(ctx context.Context, st *mapState) error {
	for st.deleted {
		err := w.createMap(ctx, st)
		switch {
		case err == nil:
			st.deleted = false
		case apierrors.IsAlreadyExists(err):
			select {
			case <-ctx.Done():
				return fmt.Errorf("recreate trafficmap %s: %w", st.ref.Key(), ctx.Err())
			case <-time.After(250 * time.Millisecond):
			}
		default:
			return err
		}
	}
	return nil
}
