// Package lease exchanges the replicas' xDS reports (package model/replicas) through
// Kubernetes Leases: each replica's Writer renews one Lease whose annotation is its report,
// and fences the replica's xDS server (closes its connections, refuses streams) when it
// cannot renew within FenceAfter of the lease duration, so the leader never counts clients
// of a replica whose report may have expired. The leader's Board reads every replica's
// report from an informer on the Leases of one election and hands the live ones (Peers) to
// the xDS sink's judgement.
package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/trafficmap/publisher/model/replicas"
)

// Interval is the shortest time between two writes of one replica's report: changes within
// it are batched into the next write.
const Interval = 250 * time.Millisecond

// Writer keeps this replica's report Lease: it builds the report every Interval, writes it
// when it changed, renews it every Duration/3 otherwise, and deletes it when it stops. It
// is the Lease's only writer; First and then Run are called from one goroutine.
//
// Every write carries a Seq above the one the Lease holds, so no two writes of the Lease
// carry the same report even when its content goes back to an earlier one. A write that
// fails may still have landed, so after a failure the next tick writes again whatever the
// content: the Lease never keeps a report older than the replica's state while the Writer
// takes it for current.
//
// Fencing: a replica whose report is not renewed stops counting for the leader once the
// report expires, while its clients would still be served what it has. So when no write
// has succeeded for FenceAfter (two thirds of Duration: the leader expires a report no
// sooner than Duration after the write that renewed it), or the first write fails, the
// Writer calls Fence (the replica closes its xDS connections and refuses streams, so its
// clients move to replicas that count), and Unfence once a write succeeds again.
type Writer struct {
	Kube kubernetes.Interface
	// Namespace and Election locate the election Lease; the report Lease lives beside it.
	Namespace, Election string
	// Identity is the replica's leader-election identity.
	Identity string
	// Duration is how long the report counts after its last renewal (the Lease's
	// leaseDurationSeconds, at least one second).
	Duration time.Duration
	// Build returns the current report; it is called from Run's goroutine only.
	Build func() replicas.Report
	// FieldManager names the writer.
	FieldManager string
	Log          *zap.Logger
	// Fence and Unfence, when set, stop and resume serving (see the type's doc); reason
	// is for clients and says nothing of the API server's errors. They are never called
	// concurrently.
	Fence   func(reason string)
	Unfence func()

	last []byte // the content (the report's JSON without Seq) last written; nil after a failed write
	seq  uint64 // the Seq last written

	fmu     sync.Mutex  // guards what follows, shared with the fence timer
	renewed time.Time   // when the last successful write started
	fenced  bool        // Fence was called, Unfence not since
	timer   *time.Timer // fences once FenceAfter passes without a renewal
}

// FenceAfter is how long after the start of its last successful write a Writer of a
// report lasting d fences its replica.
func FenceAfter(d time.Duration) time.Duration { return max(d*2/3, 2*Interval) }

// First writes the report once, before the replica serves any client, so the leader
// counts the replica from its first client on. A failure fences the replica (Run unfences
// it once a write succeeds) and is returned.
func (w *Writer) First(ctx context.Context) error {
	r, content, err := w.build()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := w.write(ctx, replicas.LeaseName(w.Election, w.Identity), r); err != nil {
		w.fence()
		return fmt.Errorf("write report lease: %w", err)
	}
	w.last = content
	w.renew(start)
	return nil
}

// build returns the current report and its content without Seq.
func (w *Writer) build() (replicas.Report, []byte, error) {
	r := w.Build()
	r.Identity, r.Seq = w.Identity, 0
	content, err := json.Marshal(r)
	if err != nil {
		return r, nil, fmt.Errorf("encode report: %w", err)
	}
	return r, content, nil
}

// renew notes a successful write started at start: the fence timer starts over and a
// fenced replica is unfenced.
func (w *Writer) renew(start time.Time) {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	w.renewed = start
	after := FenceAfter(w.Duration) - time.Since(start)
	if w.timer == nil {
		w.timer = time.AfterFunc(after, w.expire)
	} else {
		w.timer.Reset(after)
	}
	if w.fenced {
		w.fenced = false
		w.Log.Info("report lease renewed: serving xds again")
		if w.Unfence != nil {
			w.Unfence()
		}
	}
}

// expire fences the replica once FenceAfter has passed since the last renewal.
func (w *Writer) expire() {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	if time.Since(w.renewed) >= FenceAfter(w.Duration) { // not renewed meanwhile
		w.fenceLocked()
	}
}

// fence fences the replica unless it is fenced.
func (w *Writer) fence() {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	w.fenceLocked()
}

// fenceLocked is fence with fmu held.
func (w *Writer) fenceLocked() {
	if w.fenced {
		return
	}
	w.fenced = true
	since := "its start"
	if !w.renewed.IsZero() {
		since = w.renewed.UTC().Format(time.RFC3339)
	}
	w.Log.Warn("report lease not renewed: fencing this replica's xds server until it is", zap.String("since", since),
		zap.Duration("fenceAfter", FenceAfter(w.Duration)))
	if w.Fence != nil {
		w.Fence(fmt.Sprintf("replica %s has not renewed its report since %s; the leader does not count its clients: connect to another replica", w.Identity, since))
	}
}

// renewedAt is when the last successful write started.
func (w *Writer) renewedAt() time.Time {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	return w.renewed
}

// Run writes the report until ctx is done, then deletes it (a replica that stops cleanly
// stops counting at once; one that dies stops once the report expires).
func (w *Writer) Run(ctx context.Context) {
	name := replicas.LeaseName(w.Election, w.Identity)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	defer func() {
		w.fmu.Lock()
		if w.timer != nil {
			w.timer.Stop()
		}
		w.fmu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := w.Kube.CoordinationV1().Leases(w.Namespace).Delete(dctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				w.Log.Info("report lease not deleted; it expires", zap.String("lease", name), zap.Error(err))
			}
			return
		case <-tick.C:
		}
		r, content, err := w.build()
		if err != nil {
			w.Log.Error("report not encoded", zap.Error(err))
			continue
		}
		if w.last != nil && bytes.Equal(content, w.last) && time.Since(w.renewedAt()) < w.Duration/3 {
			continue
		}
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, max(w.Duration/3, Interval))
		err = w.write(wctx, name, r)
		cancel()
		if err != nil {
			w.last = nil // it may have landed: write again, whatever the content
			if ctx.Err() == nil {
				w.Log.Info("report lease not written; retrying", zap.String("lease", name), zap.Error(err))
			}
			continue
		}
		w.last = content
		w.renew(start)
	}
}

// write stores r as the report, renewing the Lease, with a Seq above the one it holds.
func (w *Writer) write(ctx context.Context, name string, r replicas.Report) error {
	leases := w.Kube.CoordinationV1().Leases(w.Namespace)
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(max(w.Duration/time.Second, 1))
	cur, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if held, derr := replicas.Decode(cur.Annotations[replicas.Annotation]); derr == nil {
			w.seq = max(w.seq, held.Seq)
		}
	}
	w.seq++
	r.Seq = w.seq
	value, eerr := replicas.Encode(r)
	if eerr != nil {
		return eerr
	}
	if apierrors.IsNotFound(err) {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace,
				Labels:      map[string]string{replicas.LabelFor: w.Election, "app.kubernetes.io/managed-by": "trafficmap-publisher"},
				Annotations: map[string]string{replicas.Annotation: value}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(w.Identity), LeaseDurationSeconds: ptr.To(seconds),
				AcquireTime: &now, RenewTime: &now},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: w.FieldManager})
		return err
	}
	l := cur.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[replicas.Annotation] = value
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[replicas.LabelFor] = w.Election
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To(w.Identity), ptr.To(seconds), &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: w.FieldManager})
	return err
}

// Board is the leader's view of every replica's report, from an informer on the report
// Leases of one election. A report is live less than its leaseDurationSeconds after this
// process last saw it change (by resourceVersion), so clocks that differ between replicas
// do not matter, as in client-go's leader election. It counts while it is live, and then,
// when it listed connected clients, for Grace more (silent, replicas.Silent): a replica
// that stopped renewing because it is frozen cannot fence itself, and its clients keep
// what it served until their keepalive gives up on it or it resumes (and fences or renews).
// A report deleted (a clean stop, which closes the connections first) stops counting at
// once. Its table is guarded by mu.
type Board struct {
	// Grace is how long a silent report still counts (see the type's doc); set before Run.
	Grace time.Duration

	self     string
	informer cache.SharedIndexInformer
	now      func() time.Time
	onChange func(keys []string)
	log      *zap.Logger
	// OnExpire, when set before Run, is called when another replica's report stops counting
	// (expired past the grace, or deleted: its clients reconnect to the replicas left),
	// before the requeue of what it listed;
	// maps it held without listing them (see replicas.Judge) are the callee's to requeue.
	OnExpire func(identity string)
	// OnBack, when set before Run, is called when another replica's report is renewed
	// after it expired (silent or no longer counted): the replica resumed or restarted, and
	// the clients it fenced or lost are reconnecting, holding what they had meanwhile.
	OnBack func(identity string)
	// OnArrived, when set before Run, is called with the clients (replicas.ClientTag) that
	// another replica's report newly lists as arrived there (replicas.Report.Arrived): a
	// client this replica remembers as departed may have come back there.
	OnArrived func(tags []string)

	mu      sync.Mutex
	reports map[string]*seen // by Lease name
}

type seen struct {
	uid      types.UID
	version  string
	observed time.Time
	duration time.Duration
	report   replicas.Report
	silent   bool // no longer live, still counted (logged once)
	expired  bool // no longer counted
}

// state is what s counts for at now: live, silent (with when it expired and when it stops
// counting), or neither.
func (b *Board) state(s *seen, now time.Time) (live bool, silent *replicas.Silent) {
	end := s.observed.Add(s.duration)
	if now.Before(end) {
		return true, nil
	}
	if until := end.Add(b.Grace); s.report.Clients > 0 && now.Before(until) {
		return false, &replicas.Silent{Since: end, Until: until}
	}
	return false, nil
}

// NewBoard watches the reports of the election Lease namespace/election. self (this
// replica's identity) is left out of Peers. onChange is called with the keys of the maps
// whose standing may have changed: those listed in a report that changed, appeared,
// expired or went away.
func NewBoard(kube kubernetes.Interface, namespace, election, self string, onChange func(keys []string), log *zap.Logger) *Board {
	sel := labels.SelectorFromSet(labels.Set{replicas.LabelFor: election}).String()
	inf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel })).Coordination().V1().Leases().Informer()
	b := &Board{self: self, informer: inf, now: time.Now, onChange: onChange, log: log, reports: map[string]*seen{}}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{ // cannot fail before it runs
		AddFunc:    func(obj any) { b.observe(obj) },
		UpdateFunc: func(_, obj any) { b.observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				b.forget(l.Name)
			}
		},
	})
	return b
}

// Run runs the informer and expires reports until ctx is done.
func (b *Board) Run(ctx context.Context) {
	go b.informer.RunWithContext(ctx)
	tick := time.NewTicker(time.Second / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			b.expire()
		}
	}
}

// HasSynced reports whether the informer has listed the reports.
func (b *Board) HasSynced() bool { return b.informer.HasSynced() }

// Peers returns the counted reports of the other replicas: the live ones, and the silent
// ones within Grace (Report.Silent set).
func (b *Board) Peers() []replicas.Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]replicas.Report, 0, len(b.reports))
	for _, name := range slices.Sorted(maps.Keys(b.reports)) {
		s := b.reports[name]
		live, silent := b.state(s, now)
		if s.report.Identity == b.self || (!live && silent == nil) {
			continue
		}
		r := s.report
		r.Silent = silent
		out = append(out, r)
	}
	return out
}

// Replicas lists every report, live or not, sorted by identity.
func (b *Board) Replicas() []replicas.Replica {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]replicas.Replica, 0, len(b.reports))
	for _, s := range b.reports {
		live, silent := b.state(s, now)
		out = append(out, replicas.Replica{Identity: s.report.Identity, Self: s.report.Identity == b.self,
			Live: live, Counted: live || silent != nil, Clients: s.report.Clients,
			Unconfirmed: len(s.report.Maps), Overflow: s.report.Overflow || len(s.report.Truncated) > 0,
			Truncated: s.report.Truncated, Seq: s.report.Seq, Renewed: s.observed})
	}
	slices.SortFunc(out, func(a, c replicas.Replica) int { return strings.Compare(a.Identity, c.Identity) })
	return out
}

func (b *Board) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	r, err := replicas.Decode(l.Annotations[replicas.Annotation])
	if err != nil {
		b.log.Info("ignoring a report lease that does not parse", zap.String("lease", l.Namespace+"/"+l.Name), zap.Error(err))
		return
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != r.Identity {
		b.log.Info("ignoring a report lease whose holder is not its reporter", zap.String("lease", l.Namespace+"/"+l.Name))
		return
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	b.mu.Lock()
	prev := b.reports[l.Name]
	if prev != nil && prev.version == l.ResourceVersion {
		b.mu.Unlock()
		return
	}
	if prev != nil && prev.uid == l.UID && r.Seq != 0 && r.Seq <= prev.report.Seq {
		// Not newer than the report already seen on this Lease (its writers each write a Seq
		// above the Lease's): never taken for the current one, nor as a renewal.
		b.mu.Unlock()
		b.log.Info("ignoring a report older than the one seen", zap.String("lease", l.Namespace+"/"+l.Name),
			zap.Uint64("seq", r.Seq), zap.Uint64("seen", prev.report.Seq))
		return
	}
	b.reports[l.Name] = &seen{uid: l.UID, version: l.ResourceVersion, observed: b.now(), duration: d, report: r}
	b.mu.Unlock()
	if prev != nil && (prev.silent || prev.expired) && r.Identity != b.self && b.OnBack != nil {
		b.OnBack(r.Identity)
	}
	if r.Identity != b.self && b.OnArrived != nil {
		var before []string
		if prev != nil && !prev.expired {
			before = prev.report.Arrived
		}
		if added := newTags(before, r.Arrived); len(added) > 0 {
			b.OnArrived(added)
		}
	}
	var keys []string
	switch {
	case r.Identity == b.self:
	case prev == nil || prev.expired:
		keys = listed(r) // a replica (back) in the count: its unconfirmed maps now wait on it
	default:
		keys = changed(prev.report, r)
	}
	if len(keys) > 0 {
		b.onChange(keys)
	}
}

func (b *Board) forget(name string) {
	b.mu.Lock()
	prev := b.reports[name]
	delete(b.reports, name)
	b.mu.Unlock()
	if prev != nil && prev.report.Identity != b.self {
		if !prev.expired && b.OnExpire != nil {
			b.OnExpire(prev.report.Identity) // it stops counting now, as at an expiry
		}
		b.onChange(listed(prev.report))
	}
}

// expire notes the reports that stopped being renewed (silent) and those that stopped
// counting, and requeues what they listed.
func (b *Board) expire() {
	now := b.now()
	var keys, gone []string
	b.mu.Lock()
	for _, s := range b.reports {
		live, silent := b.state(s, now)
		switch {
		case live || s.expired:
		case silent != nil:
			if !s.silent && s.report.Identity != b.self {
				b.log.Info("replica report expired: its clients may still hold what it served, so it counts until the peer grace ends",
					zap.String("replica", s.report.Identity), zap.Int("clients", s.report.Clients), zap.Time("until", silent.Until))
				keys = append(keys, listed(s.report)...)
			}
			s.silent = true
		default:
			s.expired, s.silent = true, false
			if s.report.Identity != b.self {
				b.log.Info("replica report expired: it no longer counts", zap.String("replica", s.report.Identity))
				keys = append(keys, listed(s.report)...)
				gone = append(gone, s.report.Identity)
			}
		}
	}
	b.mu.Unlock()
	for _, id := range gone {
		if b.OnExpire != nil {
			b.OnExpire(id)
		}
	}
	if len(keys) > 0 {
		b.onChange(keys)
	}
}

func listed(r replicas.Report) []string {
	keys := make([]string, 0, len(r.Maps))
	for _, m := range r.Maps {
		keys = append(keys, m.Key)
	}
	return keys
}

// newTags lists the tags of after (sorted) that before (sorted) does not hold.
func newTags(before, after []string) []string {
	var out []string
	for _, t := range after {
		if _, found := slices.BinarySearch(before, t); !found {
			out = append(out, t)
		}
	}
	return out
}

// changed lists the keys whose entries differ between two reports of one replica.
func changed(a, b replicas.Report) []string {
	old := make(map[string]replicas.Map, len(a.Maps))
	for _, m := range a.Maps {
		old[m.Key] = m
	}
	var keys []string
	for _, m := range b.Maps {
		if o, ok := old[m.Key]; !ok || !reflect.DeepEqual(o, m) {
			keys = append(keys, m.Key)
		}
		delete(old, m.Key)
	}
	for k := range old {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
