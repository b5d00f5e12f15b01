package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/trafficmap/publisher/integration/standin"
)

// The fault kinds the schedule injects, in the order the report lists them.
const (
	faultPublisherKill = "publisher SIGKILL and restart"
	faultLeaderKill    = "leader change (leader SIGKILLed, or replica c frozen past its lease)"
	faultAPIRestart    = "kube-apiserver restart"
	faultAPIStall      = "kube-apiserver stall (SIGSTOP)"
	faultDisconnect    = "xds client disconnect"
	faultFreeze        = "xds client frozen"
	faultNACK          = "xds client NACKs (2 KB node id, 6 KB NACK text)"
	faultGatewaySlow   = "slow gateway acceptance"
	faultStatusWrite   = "status write conflict (foreign field manager)"
	faultXDSPartition  = "xds client partitioned from its replica (stream left open)"
	faultForeignEdit   = "foreign edits of a route's weight and a Service's spec"
	faultCompaction    = "etcd compaction, then kube-apiserver restart"
	faultAPIPartition  = "replica partitioned from the kube-apiserver"
	faultGatewayReject = "gateway rejects a route"
)

var faultKinds = []string{faultPublisherKill, faultLeaderKill, faultAPIRestart, faultAPIStall, faultCompaction,
	faultAPIPartition, faultDisconnect, faultFreeze, faultXDSPartition, faultNACK, faultGatewaySlow,
	faultGatewayReject, faultStatusWrite, faultForeignEdit}

// roundRobinKinds is the order of a round-robin schedule (the smoke run): the process faults
// three apart, so that with an interval above a restart's length none waits long for another;
// the gateway's faults early, so that a short planted run (-mutation) meets them.
var roundRobinKinds = []string{faultPublisherKill, faultGatewaySlow, faultGatewayReject, faultAPIRestart, faultDisconnect,
	faultXDSPartition, faultLeaderKill, faultFreeze, faultForeignEdit, faultAPIStall, faultNACK,
	faultAPIPartition, faultCompaction, faultStatusWrite}

// foreignManager is the field manager of the foreign edits; foreignWeight and
// foreignHost are what they write (no map's own weight or endpoint).
const (
	foreignManager = "chaos-foreign"
	foreignWeight  = 777777
	foreignHost    = "foreign.chaos.invalid"
	// restoreWithin bounds the wait for the publisher to restore a foreign edit.
	restoreWithin = 30 * time.Second
)

// leaderChange is what a leader change adds to a fault's own length before the new leader
// can retract a True: the old leader's lease expiring, then the new leader still counting
// the old one's clients (--xds-peer-grace) and waiting for reconnecting ones
// (--xds-reconnect-grace).
const leaderChange = leaseDuration + xdsPeerGrace + xdsReconnectGrace

// leaderStall is how long a frozen leader stays stopped: past the replicas' 4 s lease, so
// another replica leads meanwhile and the frozen one resumes as a deposed leader.
const leaderStall = 7 * time.Second

// injection is one fault, from its start to the moment it was undone.
type injection struct {
	Kind       string
	Start, End time.Time
	Detail     string
	Err        string
	// Leader: the fault was on the leader (an API server partition), so it cost a leader
	// change.
	Leader bool
}

// faults runs the schedule: one fault every interval, picked at random; faults on the
// processes (replicas, apiserver) never overlap each other, the others overlap them.
// One lock guards the log.
type faults struct {
	rng      *rand.Rand
	cp       *controlPlane
	replicas *replicaSet
	probes   []*probe             // the checker's probes (disconnect, freeze)
	nacker   *probe               // the probe with the 2 KB node id and 6 KB NACK text
	links    map[*probe]*tcpProxy // the probes' proxies to their replicas (partition)
	gateway  *standin.Gateway
	kube     kubernetes.Interface
	gw       gwclient.Interface
	routing  standin.Routing
	maps     func() []mapRef
	logf     func(string, ...any)
	// stable is the replica never killed, whose growth is measured; as the leader it is
	// frozen (SIGSTOP) past its lease instead, which also changes the leader.
	stable string
	// roundRobin takes the kinds in turn (roundRobinKinds) instead of at random.
	roundRobin bool
	// dns is the target of the "dns answer change" fault (-gateways; nil: no such fault).
	dns *dnsTarget
	// only limits the schedule to the kinds it holds (nil: every kind); the others keep
	// their order.
	only []string

	mu      sync.Mutex
	log     []injection
	process sync.Mutex // held while a process fault is on
}

// Run injects a fault every interval until ctx ends, then waits for the faults under way.
func (f *faults) Run(ctx context.Context, interval time.Duration) {
	var wg sync.WaitGroup
	t := time.NewTicker(interval)
	defer t.Stop()
	kinds, order := f.scheduleKinds()
	random, turns := scheduleKinds(kinds, f.only), scheduleKinds(order, f.only)
	if len(turns) == 0 {
		<-ctx.Done() // no fault kind left: the workload runs alone
		return
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		}
		kind := random[f.rng.IntN(len(random))]
		if f.roundRobin {
			kind = turns[i%len(turns)]
		}
		d := time.Duration(1000+f.rng.IntN(5000)) * time.Millisecond
		pick := f.rng.Int()
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.inject(context.WithoutCancel(ctx), kind, d, pick)
		}()
	}
}

// inject runs one fault of kind for about d; pick chooses its target.
func (f *faults) inject(ctx context.Context, kind string, d time.Duration, pick int) {
	if processFault(kind) {
		switch {
		case f.roundRobin:
			f.process.Lock() // in turn: wait for the one under way
		case !f.process.TryLock():
			return // another process fault is on: skip this one
		}
		defer f.process.Unlock()
	}
	in := injection{Kind: kind, Start: time.Now()}
	f.logf("fault %s: start", kind)
	detail, err := f.apply(ctx, kind, d, pick, &in)
	f.logf("fault %s: over after %s: %s", kind, time.Since(in.Start).Round(time.Millisecond), detail)
	in.End, in.Detail = time.Now(), detail
	if err != nil {
		in.Err = err.Error()
		f.logf("fault %s: %v", kind, err)
	}
	if detail == "" && err == nil {
		return // nothing to do (no target)
	}
	f.mu.Lock()
	f.log = append(f.log, in)
	f.mu.Unlock()
}

// scheduleKinds is kinds without those only does not hold, in their order (every one of
// kinds when only is nil).
func scheduleKinds(kinds, only []string) []string {
	if only == nil {
		return kinds
	}
	return slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return !slices.Contains(only, k) })
}

// mayChangeLeader: a fault of kind may cost a leader change (outage adds leaderChange for
// it: always for a kill, for an API server outage past the renew deadline, for the
// leader's partition from the API server). The new leader confirms no new content of the
// old leader's clients for --xds-peer-grace, so it writes few Trues meanwhile.
func mayChangeLeader(kind string) bool {
	return processFault(kind) || kind == faultAPIPartition
}

// processFault: kind stops a replica or the API server.
func processFault(kind string) bool {
	return kind == faultPublisherKill || kind == faultLeaderKill || kind == faultAPIRestart || kind == faultAPIStall ||
		kind == faultCompaction
}

// apply injects one fault and undoes it; it notes in in what the outage bounds need.
func (f *faults) apply(ctx context.Context, kind string, d time.Duration, pick int, in *injection) (string, error) {
	switch kind {
	case faultPublisherKill, faultLeaderKill:
		return f.kill(ctx, kind, d, pick)
	case faultAPIRestart:
		return "apiserver stopped and started", f.cp.RestartAPIServer(ctx)
	case faultAPIStall:
		return fmt.Sprintf("stalled %s", d.Round(time.Millisecond)), f.cp.StallAPIServer(ctx, d)
	case faultDisconnect:
		p := f.probes[pick%len(f.probes)]
		p.Disconnect()
		return "probe " + p.ID(), nil
	case faultFreeze:
		p := f.probes[pick%len(f.probes)]
		p.Freeze(d)
		sleep(ctx, d)
		return fmt.Sprintf("probe %s frozen %s", p.ID(), d.Round(time.Millisecond)), nil
	case faultNACK:
		n := 1 + pick%3
		f.nacker.NACK(n)
		sleep(ctx, d)
		// A client that rejected a configuration asks again only when it restarts (the
		// publisher does not resend rejected content): reconnect, as a fixed client would.
		// The NACKs no response came for within d end here: one falling on the new
		// stream's first change would reject content nothing resends, which no fix follows.
		left := f.nacker.StopNACKs()
		f.nacker.Disconnect()
		return fmt.Sprintf("probe %s NACKed %d of the next %d responses, reconnects after %s", f.nacker.ID(), n-left, n, d.Round(time.Millisecond)), nil
	case faultGatewaySlow:
		f.gateway.Pause()
		sleep(ctx, d)
		f.gateway.Resume()
		return fmt.Sprintf("gateway paused %s", d.Round(time.Millisecond)), nil
	case faultStatusWrite:
		return f.foreignStatus(ctx, pick)
	case faultCompaction:
		rev, err := f.cp.CompactAndRestartAPIServer(ctx)
		return fmt.Sprintf("etcd compacted to revision %d, apiserver stopped and started", rev), err
	case faultXDSPartition:
		p := f.probes[pick%len(f.probes)]
		link := f.links[p]
		if link == nil {
			return "probe " + p.ID(), errors.New("the probe has no proxy")
		}
		link.Blackhole(ctx, d)
		return fmt.Sprintf("probe %s cut off %s", p.ID(), d.Round(time.Millisecond)), nil
	case faultAPIPartition:
		return f.partitionReplica(ctx, d, pick, in)
	case faultGatewayReject:
		return f.reject(ctx, d, pick)
	case faultForeignEdit:
		return f.foreignEdit(ctx, pick)
	case faultDNSChange:
		if f.dns == nil {
			return "", nil
		}
		return f.dns.dnsChange(ctx, d, pick)
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

// kill SIGKILLs a replica (the leader for a leader change; never the stable one) and
// starts it again after d.
func (f *faults) kill(ctx context.Context, kind string, d time.Duration, pick int) (string, error) {
	var target string
	if kind == faultLeaderKill {
		leader, err := f.liveLeader(ctx)
		if err != nil || leader == "" {
			return "", err
		}
		if leader == f.stable {
			d = leaderStall
			if err := f.replicas.Freeze(ctx, leader, d); err != nil {
				return "replica " + leader, err
			}
			return fmt.Sprintf("leader %s frozen (SIGSTOP) %s, past its lease", leader, d), nil
		}
		target = leader
	} else {
		var candidates []string
		for _, n := range f.replicas.Names() {
			if n != f.stable && f.replicas.Up(n) {
				candidates = append(candidates, n)
			}
		}
		if len(candidates) == 0 {
			return "", nil
		}
		target = candidates[pick%len(candidates)]
	}
	if err := f.replicas.Kill(target); err != nil {
		return "replica " + target, err
	}
	sleep(ctx, d)
	return fmt.Sprintf("replica %s killed, restarted after %s", target, d.Round(time.Millisecond)), f.replicas.Start(ctx, target)
}

// liveLeader waits up to 30 s for the election Lease to name a running replica (after a
// kill the Lease names the dead one until it expires) and returns it, "" when none did.
func (f *faults) liveLeader(ctx context.Context) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		leader, err := f.replicas.Leader(ctx)
		if err == nil && leader != "" && f.replicas.Up(leader) {
			return leader, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", err
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// foreignStatus applies OME routing status (another field manager, forced) to a few maps,
// so that the publisher's guarded status writes of those maps conflict.
func (f *faults) foreignStatus(ctx context.Context, pick int) (string, error) {
	maps := f.maps()
	if len(maps) == 0 {
		return "", nil
	}
	n := 1 + pick%5
	var errs []error
	for i := range n {
		m := maps[(pick/7+i*13)%len(maps)]
		tm, err := f.routing.Client.OmeV1beta1().TrafficMaps(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		msg := fmt.Sprintf("chaos %d", pick%1000+i)
		_, err = f.routing.ApplyStatus(ctx, m.Namespace, m.Name, tm.Status.SourceUID,
			metav1.Condition{Status: metav1.ConditionTrue, Reason: "Routable", Message: msg},
			metav1.Condition{Status: metav1.ConditionFalse, Reason: "NoOverride", Message: msg})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Sprintf("%d maps", n), fmt.Errorf("foreign status writes: %v", errs)
	}
	return fmt.Sprintf("%d maps", n), nil
}

// partitionReplica cuts a replica off the API server for d: the leader for an even pick
// (noted in in), else another running one.
func (f *faults) partitionReplica(ctx context.Context, d time.Duration, pick int, in *injection) (string, error) {
	leader, err := f.liveLeader(ctx)
	if err != nil {
		return "", err
	}
	target := leader
	if pick%2 == 1 || leader == "" {
		var others []string
		for _, n := range f.replicas.Names() {
			if n != leader && f.replicas.Up(n) {
				others = append(others, n)
			}
		}
		if len(others) == 0 {
			return "", nil
		}
		target = others[(pick/2)%len(others)]
	}
	in.Leader = target == leader
	role := "follower"
	if in.Leader {
		role = "leader"
	}
	if err := f.replicas.PartitionFromAPIServer(ctx, target, d); err != nil {
		return "replica " + target, err
	}
	return fmt.Sprintf("%s %s cut off %s", role, target, d.Round(time.Millisecond)), nil
}

// pickMap returns one map and its HTTPRoute (the publisher's, found by its labels); nil
// when there is none (no maps, or the map has no route now).
func (f *faults) pickMap(ctx context.Context, pick int) (mapRef, *gwapiv1.HTTPRoute, error) {
	maps := f.maps()
	if len(maps) == 0 {
		return mapRef{}, nil, nil
	}
	m := maps[pick%len(maps)]
	routes, err := f.gw.GatewayV1().HTTPRoutes(m.Namespace).List(ctx, metav1.ListOptions{LabelSelector: mapSelector(m)})
	if err != nil || len(routes.Items) == 0 {
		return m, nil, err
	}
	return m, &routes.Items[0], nil
}

func mapSelector(m mapRef) string {
	return labelSourceNamespace + "=" + m.Namespace + "," + labelSourceName + "=" + m.Name
}

// reject makes the gateway refuse one map's route for d.
func (f *faults) reject(ctx context.Context, d time.Duration, pick int) (string, error) {
	m, route, err := f.pickMap(ctx, pick)
	if route == nil {
		return "", err
	}
	f.gateway.Reject(route.Namespace, route.Name)
	sleep(ctx, d)
	f.gateway.Accept(route.Namespace, route.Name)
	return fmt.Sprintf("map %s: route %s rejected %s", m.Key(), route.Name, d.Round(time.Millisecond)), nil
}

// foreignEdit has another field manager set one map's first backend weight to
// foreignWeight and one of its Services' ExternalName to foreignHost (its port, when it has
// no ExternalName), then waits up to restoreWithin for the publisher to restore both.
func (f *faults) foreignEdit(ctx context.Context, pick int) (string, error) {
	m, route, err := f.pickMap(ctx, pick)
	if route == nil {
		return "", err
	}
	var edited []string
	var errs []error
	routes := f.gw.GatewayV1().HTTPRoutes(route.Namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := routes.Get(ctx, route.Name, metav1.GetOptions{})
		if err != nil || len(r.Spec.Rules) == 0 || len(r.Spec.Rules[0].BackendRefs) == 0 {
			return err
		}
		r.Spec.Rules[0].BackendRefs[0].Weight = ptr.To[int32](foreignWeight)
		_, err = routes.Update(ctx, r, metav1.UpdateOptions{FieldManager: foreignManager})
		return err
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("edit route %s: %w", route.Name, err))
	} else {
		edited = append(edited, "route "+route.Name)
	}
	var svcName string
	var svcPort int32 // the port written, when the edit is of the port
	svcs := f.kube.CoreV1().Services(m.Namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		list, err := svcs.List(ctx, metav1.ListOptions{LabelSelector: mapSelector(m)})
		if err != nil || len(list.Items) == 0 {
			return err
		}
		s := list.Items[(pick/3)%len(list.Items)]
		svcName = s.Name
		if s.Spec.ExternalName != "" {
			s.Spec.ExternalName = foreignHost
		} else if len(s.Spec.Ports) > 0 {
			svcPort = foreignPort(s.Spec.Ports[0].Port)
			s.Spec.Ports[0].Port = svcPort
		}
		_, err = svcs.Update(ctx, &s, metav1.UpdateOptions{FieldManager: foreignManager})
		return err
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("edit service %s: %w", svcName, err))
	} else if svcName != "" {
		edited = append(edited, "service "+svcName)
	}
	if len(edited) == 0 {
		return "", errors.Join(errs...)
	}
	start := time.Now()
	restored := map[string]time.Duration{}
	for len(restored) < len(edited) && time.Since(start) < restoreWithin && ctx.Err() == nil {
		sleep(ctx, 100*time.Millisecond)
		for _, what := range edited {
			if _, ok := restored[what]; !ok && f.restored(ctx, route.Namespace, what, svcPort) {
				restored[what] = time.Since(start)
			}
		}
	}
	parts := make([]string, 0, len(edited))
	for _, what := range edited {
		if t, ok := restored[what]; ok {
			parts = append(parts, fmt.Sprintf("%s restored after %s", what, t.Round(10*time.Millisecond)))
		} else {
			parts = append(parts, fmt.Sprintf("%s not restored within %s", what, restoreWithin))
			errs = append(errs, fmt.Errorf("%s not restored within %s", what, restoreWithin))
		}
	}
	return fmt.Sprintf("map %s: %s", m.Key(), strings.Join(parts, ", ")), errors.Join(errs...)
}

// foreignPort is a port that is not p.
func foreignPort(p int32) int32 {
	if p == 65535 {
		return 1
	}
	return p + 1
}

// restored: the foreign edit of what ("route NAME" or "service NAME", whose port the edit
// set to port unless 0) is gone (the object too counts: the map was deleted).
func (f *faults) restored(ctx context.Context, ns, what string, port int32) bool {
	kind, name, _ := strings.Cut(what, " ")
	if kind == "route" {
		r, err := f.gw.GatewayV1().HTTPRoutes(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true
		}
		if err != nil {
			return false
		}
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				if ptr.Deref(b.Weight, 1) == foreignWeight {
					return false
				}
			}
		}
		return true
	}
	s, err := f.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil || s.Spec.ExternalName == foreignHost {
		return false
	}
	return port == 0 || len(s.Spec.Ports) == 0 || s.Spec.Ports[0].Port != port
}

// Log returns the injections so far.
func (f *faults) Log() []injection {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// lagAt is how far before t a True seen at t may have been written: 2 s, or the length of
// an apiserver fault that ended within the last 30 s plus 5 s (the watch is delayed or
// re-established meanwhile).
func (f *faults) lagAt(t time.Time) time.Duration {
	lag := 2 * time.Second
	for _, in := range f.Log() {
		if in.Kind != faultAPIRestart && in.Kind != faultAPIStall && in.Kind != faultCompaction {
			continue
		}
		if in.Start.Before(t) && t.Sub(in.End) < 30*time.Second {
			lag = max(lag, t.Sub(in.Start)+time.Second)
		}
	}
	return lag
}

// outage is how long, from t on within within, the API server or the leader could not
// write: the length of every fault on the API server or a replica's way to it and every
// kill whose reach overlaps [t, t+within], plus leaderChange for each that
// may have changed the leader: a kill (of the leader, or of a replica that may lead), an
// API server outage past the renew deadline, the leader's partition. A fault's reach is
// its own length, and leaderChange more for one that may have changed the leader: the new
// leader withholds Trues for the graces after it took over, so a map published during them
// waits for the fault's aftermath even when the fault itself was over before t (a
// 30-minute run counted ten maps stuck 15-19 s that a leader change 2-29 s earlier held).
// A fault that began before t adds its whole length: the bound errs by the part already
// elapsed, never short.
func (f *faults) outage(t time.Time, within time.Duration) time.Duration {
	var d time.Duration
	for _, in := range f.Log() {
		length, change := in.End.Sub(in.Start), leaderChanged(in)
		reach := in.End
		if change {
			reach = reach.Add(leaderChange)
		}
		if in.Start.After(t.Add(within)) || reach.Before(t) {
			continue
		}
		switch in.Kind {
		case faultAPIRestart, faultAPIStall, faultCompaction, faultLeaderKill, faultPublisherKill, faultAPIPartition:
			d += length
			if change {
				d += leaderChange
			}
		}
	}
	return d
}

// leaderChanged: the injection may have changed the leader (see outage).
func leaderChanged(in injection) bool {
	switch in.Kind {
	case faultAPIRestart, faultAPIStall, faultCompaction:
		return in.End.Sub(in.Start) > renewDeadline
	case faultLeaderKill, faultPublisherKill:
		return true
	case faultAPIPartition:
		return in.Leader
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
