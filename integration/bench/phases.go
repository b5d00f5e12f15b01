package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// phaseTimeout bounds every wait for one change to show.
const phaseTimeout = 60 * time.Second

// bench is one benchmark run.
type bench struct {
	o       options
	c       clients
	cfg     *rest.Config // the bench's own API access (no rate limit)
	w       *watchers
	pub     *publisherProcess
	xds     []*xdsClient
	cancel  context.CancelFunc
	intents []intent // what each map's drain annotation says now
	report  report
}

func createNamespace(ctx context.Context, c clients) error {
	_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	return nil
}

// coldStart is P2: it starts the xDS clients, then the publisher, and times publisher start
// to every map Published True (with --xds-min-clients C, that includes every client's ACK).
func (b *bench) coldStart(ctx context.Context, bin, kubeconfig string) error {
	all := make(chan time.Time, 1)
	defer b.w.maps.setOnEvent(nil)
	tl := newColdTimeline()
	b.w.routes.setOnEvent(tl.route)
	defer b.w.routes.setOnEvent(nil)

	qps, burst := b.o.qps, b.o.burst
	if qps == 0 {
		qps, burst = 50, 100 // the publisher's defaults
	}
	workers := b.o.workers
	if workers == 0 {
		workers = 4
	}
	apiserver, etcd := controlPlanePIDs(b.cfg.Host)
	meter := cpuMeter{names: []string{"kube-apiserver", "etcd", "bench"}, pids: []int{apiserver, etcd, os.Getpid()}}
	logf("P2 floor: a bare client makes the same writes at %g QPS (burst %d)", qps, burst)
	bare, bareWritesN, floorCPU, err := bareWrites(ctx, b.cfg, b.o.maps, qps, burst, workers, meter)
	if err != nil {
		return err
	}
	logf("P2 floor: %d bare writes in %s; cores used: %s", bareWritesN, bare.Round(time.Millisecond), floorCPU)

	logf("P2: starting the publisher (N=%d, C=%d)", b.o.maps, b.o.clients)
	start := time.Now()
	tl.start(start)
	b.w.maps.setOnEvent(func(obj any) {
		tm, ok := obj.(*v1beta1.TrafficMap)
		if !ok || !isPublished(tm) {
			return
		}
		if n, first := tl.mapPublished(tm.Name); first && n == b.o.maps {
			all <- time.Now()
		}
	})
	if b.pub, err = startPublisher(bin, kubeconfig, filepath.Join(b.o.workDir, "publisher.log"), b.o); err != nil {
		return err
	}
	meter.names = append(meter.names, "publisher")
	meter.pids = append(meter.pids, b.pub.cmd.Process.Pid)
	cpu0 := meter.read()
	req0, err := apiRequests(ctx, b.c.kube)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	b.cancel = cancel
	b.xds = b.o.newClients()
	for _, cl := range b.xds {
		go cl.run(cctx, b.pub.xdsAddr)
	}
	cpuProfile := make(chan error, 1)
	ended := make(chan struct{}) // the cold start ended: a profile not begun yet is not taken
	go func() {
		select {
		case <-ctx.Done():
		case <-ended:
			cpuProfile <- fmt.Errorf("not taken: the cold start ended within -cold-profile-after %s", b.o.coldProfileAfter)
			return
		case <-time.After(b.o.coldProfileAfter):
		}
		// The API server's and the bench's own CPU over the same 30 s: what the cold start costs them.
		go func() {
			if err := apiServerProfile(ctx, b.c.kube, 30*time.Second, filepath.Join(b.o.workDir, "apiserver-cpu-cold.pprof")); err != nil {
				logf("P2: no API server profile: %v", err)
			}
		}()
		if _, err := selfProfile(filepath.Join(b.o.workDir, "bench-cpu-cold.pprof"), 30*time.Second); err != nil {
			logf("P2: no bench profile: %v", err)
		}
		// The heap as of the last collection, in the middle of the cold start (what its peak holds).
		if err := b.pub.profile(ctx, "heap", filepath.Join(b.o.workDir, "heap-cold.pprof")); err != nil {
			logf("P2: no heap profile of the cold start: %v", err)
		}
		cpuProfile <- b.profileWhenUp(ctx, "profile?seconds=30", "cpu-cold.pprof")
	}()

	timeout := time.Duration(b.o.maps)*100*time.Millisecond + 2*time.Minute
	var done time.Time
	select {
	case done = <-all:
	case <-time.After(timeout):
		return errors.Join(fmt.Errorf("P2: %d/%d maps Published True after %s", tl.publishedCount(), b.o.maps, timeout), b.clientErr())
	case <-b.pub.done:
		return fmt.Errorf("P2: publisher exited: %v (log: %s)", b.pub.err, filepath.Join(b.o.workDir, "publisher.log"))
	}
	elapsed := done.Sub(start)
	coldCPU := meter.cores(cpu0, meter.read(), runtime.NumCPU())
	tl.log()
	var mapWrites, events, routeStatus int
	var requests string
	if req1, err := apiRequests(ctx, b.c.kube); err == nil {
		logf("P2: API requests during the cold start (every client): %s", requestDelta(req0, req1))
		mapWrites, events = publisherWrites(req0, req1)
		requests, routeStatus = perMap(req0, req1, b.o.maps)
	}
	// The minimum under OME's publisher protocol (see floorWritesPerMap); the rate-limit
	// arithmetic is the time that many writes take at qps after the burst.
	minWrites := b.o.maps * floorWritesPerMap
	floor := time.Duration(float64(max(0, minWrites-burst)) / qps * float64(time.Second))
	logf("P2: every map Published True after %s (bare-write floor %s, rate-limit arithmetic %s; %d writes made by the API server's count, %d needed)", elapsed.Round(time.Millisecond), bare.Round(time.Millisecond), floor, mapWrites, minWrites)
	b.report.add("P2 cold start: publisher start to every map Published True", dur(elapsed),
		fmt.Sprintf("<= 1.3x bare-write floor (%s)", dur(time.Duration(1.3*float64(bare)))), float64(elapsed) <= 1.3*float64(bare))
	b.report.add("P2 floor: a bare client making the same writes (per map: a Service per cluster, the route, the TrafficMap's finalizer, claim journal, record ConfigMap and Published at the same QPS; the gateway's route status write with the gateway's client), same API server, just before",
		fmt.Sprintf("%s (%d writes at %g QPS, burst %d; %d of them the gateway's)", dur(bare), bareWritesN, qps, burst, b.o.maps*floorGatewayWritesPerMap), "", true)
	b.report.add("P2 the stand-in gateway's route status writes during the cold start (the floor makes one per map)",
		fmt.Sprintf("%d (%.2f per map)", routeStatus, float64(routeStatus)/float64(b.o.maps)), "", true)
	b.report.add("P2 requests per map during the cold start by verb and resource, by the API server's count (every client but the gateway's route status writes: the publisher's, and the gateway's reads)", requests, "", true)
	b.report.add("P2 cores used during the floor's writes / during the cold start (the bench process holds the xDS clients, the stand-in gateway and the watches)",
		floorCPU+" / "+coldCPU, "", true)
	b.report.add("P2 rate-limit arithmetic", fmt.Sprintf("%s (%d writes)", dur(floor), minWrites), "", true)
	b.report.add("P2 ratio to the bare-write floor", fmt.Sprintf("%.2fx", float64(elapsed)/float64(max(bare, time.Millisecond))), "<= 1.3x", float64(elapsed) <= 1.3*float64(bare))
	b.report.add("P2 every write the publisher made, by the API server's count (Services, routes, TrafficMap finalizers and status: claim journal and Published) / Events",
		fmt.Sprintf("%d (%.2f per map) / %d", mapWrites, float64(mapWrites)/float64(b.o.maps), events),
		fmt.Sprintf("%d (%d per map: the protocol's minimum)", minWrites, floorWritesPerMap), mapWrites == minWrites)
	b.report.add("P2 what the xDS clients received during the cold start, per client of each kind (mean): bytes / responses", b.received(nil, b.envoyConfigBytes()), "", true)
	close(ended)
	if err := <-cpuProfile; err != nil {
		logf("cold start cpu profile: %v", err)
	}
	return b.clientErr()
}

// received is what each kind of xDS client received so far, per client (mean), e.g.
// "Envoy SotW 1811.3 MB / 161; Envoy delta 292.9 MB / 161; gRPC SotW 0.0 MB / 17", with
// the Envoys' bytes as a multiple of final, the Envoy flavour's whole configuration (none
// when 0). Counted from since (a client's bytes and responses then; nil: from the start).
func (b *bench) received(since map[*xdsClient]received, final int64) string {
	type sum struct{ bytes, responses, clients int64 }
	by := map[string]*sum{}
	for _, cl := range b.xds {
		s := by[cl.label()]
		if s == nil {
			s = &sum{}
			by[cl.label()] = s
		}
		s.bytes += cl.bytes.Load() - since[cl].bytes
		s.responses += cl.responses.Load() - since[cl].responses
		s.clients++
	}
	var parts []string
	for _, l := range slices.Sorted(maps.Keys(by)) {
		s := by[l]
		parts = append(parts, fmt.Sprintf("%s %.1f MB / %d", l, float64(s.bytes)/float64(s.clients)/1e6, s.responses/s.clients))
	}
	if final > 0 {
		for _, l := range []string{"Envoy SotW", "Envoy delta"} {
			if s := by[l]; s != nil {
				parts = append(parts, fmt.Sprintf("%s %.2fx", l, float64(s.bytes)/float64(s.clients)/float64(final)))
			}
		}
		parts = append(parts, fmt.Sprintf("of the Envoy flavour's configuration at the end (%.1f MB: the last response of each type to an Envoy SotW client)", float64(final)/1e6))
	}
	return strings.Join(parts, "; ")
}

// received is what one client had received at a moment.
type received struct{ bytes, responses int64 }

// envoyConfigBytes is the size of the Envoy flavour's whole configuration as an Envoy
// state-of-the-world client holds it now (the last response of each type: each carries
// the whole type), 0 without such a client.
func (b *bench) envoyConfigBytes() int64 {
	for _, cl := range b.xds {
		if cl.kind == "envoy" && !cl.delta {
			return cl.held()
		}
	}
	return 0
}

// profileWhenUp waits for the publisher's HTTP server and saves a profile.
func (b *bench) profileWhenUp(ctx context.Context, path, file string) error {
	for range 600 {
		if _, err := b.pub.metrics(); err == nil {
			return b.pub.profile(ctx, path, filepath.Join(b.o.workDir, file))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("publisher http server not up")
}

func (b *bench) clientErr() error {
	for _, c := range b.xds {
		select {
		case err := <-c.errs:
			return fmt.Errorf("%w: %w", errClientFailed, err)
		default:
		}
	}
	return nil
}

func (b *bench) stopPublisher() {
	if b.pub != nil {
		b.pub.stop()
	}
}

func (b *bench) stopClients() {
	if b.cancel != nil {
		b.cancel()
	}
}

// memory is P3: resident memory and Go heap once every map is published and the
// publisher has settled, and the resident peak (what a container limit must hold).
func (b *bench) memory(ctx context.Context) error {
	time.Sleep(10 * time.Second) // let the follow-up reconciles (gateway status) settle
	first, err := b.pub.rss()
	if err != nil {
		return err
	}
	ms, waited, err := b.settledRSS(first)
	if err != nil {
		return err
	}
	rss, anon := ms.rss, ms.anon
	m, err := b.pub.metrics()
	if err != nil {
		return err
	}
	heap := m["go_memstats_heap_inuse_bytes"]
	// The heap profile with gc=1 collects first, so it and the heap read after it show what
	// is live; heap in use above also holds garbage not yet collected (GOGC=100 lets the heap
	// grow to twice the live size between collections).
	if err := b.pub.profile(ctx, "heap?gc=1", filepath.Join(b.o.workDir, "heap.pprof")); err != nil {
		return err
	}
	if m, err = b.pub.metrics(); err != nil {
		return err
	}
	live := m["go_memstats_heap_inuse_bytes"]
	// Where the anonymous pages go besides the live heap: freed heap not yet returned to the
	// system, goroutine stacks, the collector's and the span allocator's own metadata.
	logf("P3: after a collection: objects %s, heap idle not returned %s, stacks %s, spans %s, collector metadata %s, other runtime %s",
		mib(m["go_memstats_heap_alloc_bytes"]), mib(m["go_memstats_heap_idle_bytes"]-m["go_memstats_heap_released_bytes"]), mib(m["go_memstats_stack_inuse_bytes"]),
		mib(m["go_memstats_mspan_inuse_bytes"]), mib(m["go_memstats_gc_sys_bytes"]), mib(m["go_memstats_other_sys_bytes"]))
	logf("P3: rss %s (anonymous %s, the binary's pages %s), heap in use %s, after a collection %s", mib(float64(rss)), mib(float64(anon)), mib(float64(rss-anon)), mib(heap), mib(live))
	target, limit := b.o.rssTarget()
	b.report.add("P3 resident memory (VmRSS) at steady state (anonymous / the binary's pages)",
		fmt.Sprintf("%s (%s / %s)", mib(float64(rss)), mib(float64(anon)), mib(float64(rss-anon))), target, limit == 0 || float64(rss) <= limit)
	b.report.add("P3 resident memory 10 s after the cold start / settled (after "+dur(waited)+") / peak (VmHWM: what a container limit must hold)",
		fmt.Sprintf("%s / %s / %s", mib(float64(first.rss)), mib(float64(rss)), mib(float64(ms.peak))), "", true)
	b.report.add("P3 Go heap in use at steady state / right after a forced collection (live)", mib(heap)+" / "+mib(live), "", true)
	// The publisher's own accounting of its xDS server (what an operator sizes from).
	resources, encoded, streams := sum(m, "trafficmap_publisher_xds_resources"), sum(m, "trafficmap_publisher_xds_encoded_bytes"), sum(m, "trafficmap_publisher_xds_streams")
	logf("P3: xds server holds %.0f resources, %s of kept encodings, %.0f streams", resources, mib(encoded), streams)
	b.report.add("P3 xDS server's own accounting (/metrics): resources served, kept encodings, streams",
		fmt.Sprintf("%.0f, %s, %.0f", resources, mib(encoded), streams), "", true)
	return nil
}

// settledRSS samples the publisher's resident memory every settleEvery from first until
// two samples in a row differ by less than 2% (the Go runtime returns freed pages to the
// system in the background, over minutes), at most settleMax; it returns the last sample
// and the time waited.
func (b *bench) settledRSS(first memStat) (memStat, time.Duration, error) {
	const settleEvery, settleMax = 10 * time.Second, 2 * time.Minute
	prev, start := first, time.Now()
	for time.Since(start) < settleMax {
		time.Sleep(settleEvery)
		cur, err := b.pub.rss()
		if err != nil {
			return memStat{}, 0, err
		}
		settled := math.Abs(float64(cur.rss-prev.rss)) < 0.02*float64(prev.rss)
		prev = cur
		if settled {
			break
		}
	}
	return prev, time.Since(start).Round(time.Second), nil
}

// reconciles is the publisher's trafficmap_publisher_reconciles_total, summed over its labels.
func (b *bench) reconciles() (float64, error) {
	m, err := b.pub.metrics()
	if err != nil {
		return 0, err
	}
	var n float64
	for name, v := range m {
		if name == "trafficmap_publisher_reconciles_total" || strings.HasPrefix(name, "trafficmap_publisher_reconciles_total{") {
			n += v
		}
	}
	return n, nil
}

// drainLatency is P1 and P5.
func (b *bench) drainLatency(ctx context.Context) error {
	n := min(b.o.drains, b.o.maps)
	var floor, a, bb, c, firstAck []time.Duration
	lastBy := map[string][]time.Duration{} // by client label
	bytesBy := map[string][]float64{}      // per client per drain, by client label
	resBy := map[string][]float64{}        // per client per drain, by client label
	maxResBy := map[string]int64{}         // by client label
	relevant := 0                          // clients relevant to a drain, summed over the drains
	logf("P1: %d drains, each next to a floor probe", n)
	cpu0, err := b.pub.cpuSeconds()
	if err != nil {
		return err
	}
	rec0, err := b.reconciles()
	if err != nil {
		return err
	}
	profile := make(chan error, 1)
	go func() {
		profile <- b.pub.profile(ctx, "profile?seconds=20", filepath.Join(b.o.workDir, "cpu-drain.pprof"))
	}()
	// The bench's own CPU over the same 20 s (its clients decode what they receive on
	// the same cores as the publisher): bench-cpu-drain.pprof.
	stopSelf, err := selfProfile(filepath.Join(b.o.workDir, "bench-cpu-drain.pprof"), 20*time.Second)
	if err != nil {
		return err
	}
	defer stopSelf()
	defer func() {
		if err := <-profile; err != nil {
			logf("drain cpu profile: %v", err)
		}
	}()
	for d := range n {
		// The floor: a bare write of one object and the watch event that reports it.
		value := fmt.Sprintf("%d", d)
		probe := b.w.probes.expect(floorProbe, probeIs(value))
		t0 := time.Now()
		if err := writeProbe(ctx, b.c, value); err != nil {
			return err
		}
		t, err := wait(probe, phaseTimeout, "floor probe")
		if err != nil {
			return err
		}
		floor = append(floor, t.Sub(t0))

		i := d * b.o.maps / n
		in := intent{id: fmt.Sprintf("bench-%d", d), cluster: d % clustersPerMap}
		want := in.weightsFor()
		before := make([][2]int64, len(b.xds))
		for k, cl := range b.xds {
			before[k] = [2]int64{cl.bytes.Load(), cl.resources.Load()}
		}
		routeCh := b.w.routes.expect(routeNameOf(i), routeIs(i, want))
		mapCh := b.w.maps.expect(mapName(i), mapPublished(in))
		acks := make([]<-chan time.Time, len(b.xds)) // nil for a client that does not hold map i
		for k, cl := range b.xds {
			if cl.watches(i) {
				acks[k] = cl.expect(xdsRouteName(i), func(s string) bool { return s == want })
				relevant++
			}
		}
		t0 = time.Now()
		if err := setDrain(ctx, b.c, i, drainValue(in.id, in.cluster)); err != nil {
			return err
		}
		b.intents[i] = in
		tRoute, err := wait(routeCh, phaseTimeout, "P1 (a) route of "+mapName(i))
		if err != nil {
			return err
		}
		var lastAck, first time.Time
		last := map[string]time.Time{}
		for k, ch := range acks {
			if ch == nil {
				continue
			}
			t, err := wait(ch, phaseTimeout, "P1 (b) ack of "+mapName(i)+" by "+b.xds[k].id)
			if err != nil {
				return err
			}
			lastAck = latest(lastAck, t)
			if first.IsZero() || t.Before(first) {
				first = t
			}
			last[b.xds[k].label()] = latest(last[b.xds[k].label()], t)
		}
		if lastAck.IsZero() { // no client holds the map: (b) is its route's time
			lastAck, first = tRoute, tRoute
		}
		firstAck = append(firstAck, first.Sub(t0))
		for l, t := range last {
			lastBy[l] = append(lastBy[l], t.Sub(t0))
		}
		tMap, err := wait(mapCh, phaseTimeout, "P1 (c) Published of "+mapName(i))
		if err != nil {
			return err
		}
		a, bb, c = append(a, tRoute.Sub(t0)), append(bb, lastAck.Sub(t0)), append(c, tMap.Sub(t0))
		for k, cl := range b.xds {
			db, dr := float64(cl.bytes.Load()-before[k][0]), float64(cl.resources.Load()-before[k][1])
			l := cl.label()
			bytesBy[l], resBy[l] = append(bytesBy[l], db), append(resBy[l], dr)
			maxResBy[l] = max(maxResBy[l], int64(dr))
		}
		if err := b.clientErr(); err != nil {
			return err
		}
	}
	cpu1, err := b.pub.cpuSeconds()
	if err != nil {
		return err
	}
	fl, pa, pb, pc := pct(floor), pct(a), pct(bb), pct(c)
	logf("P1: floor %s; (a) %s; (b) %s [first %s]; (c) %s; %.1f relevant clients per drain", fl, pa, pb, pct(firstAck), pc, float64(relevant)/float64(n))
	bSlack, cSlack := 30*time.Millisecond, 50*time.Millisecond
	if b.o.mix == "stress" {
		bSlack, cSlack = 150*time.Millisecond, 250*time.Millisecond
	}
	b.report.add("Floor: bare write + watch event of one object (p50 / p95 / p99)", fl.String(), "", true)
	b.report.add("P1 (a) drain write to HTTPRoute change seen by a watch (p50 / p95 / p99)", pa.String(),
		fmt.Sprintf("p99 <= 2x floor p99 + 50 ms = %s", dur(2*fl.p99+50*time.Millisecond)), pa.p99 <= 2*fl.p99+50*time.Millisecond)
	b.report.add("P1 (a) ratio to floor (p50 / p99)", fmt.Sprintf("%.1fx / %.1fx", ratio(pa.p50, fl.p50), ratio(pa.p99, fl.p99)), "", true)
	b.report.add(fmt.Sprintf("P1 (b) drain write to the last relevant xDS client's ACK (p50 / p95 / p99; %.1f relevant clients per drain)", float64(relevant)/float64(n)), pb.String(),
		fmt.Sprintf("p99 <= (a) p99 + %s = %s", dur(bSlack), dur(pa.p99+bSlack)), pb.p99 <= pa.p99+bSlack)
	b.report.add("P1 (b) breakdown: first client's ACK (p50 / p95 / p99)", pct(firstAck).String(), "", true)
	b.report.add("P1 publisher CPU per drain (its CPU time over the drains, floor probes included; less load-dependent than the latencies)", fmt.Sprintf("%.1f ms", (cpu1-cpu0)*1000/float64(n)), "", true)
	if rec1, err := b.reconciles(); err == nil {
		b.report.add("P1 reconciles per drain (trafficmap_publisher_reconciles_total over the drains)", fmt.Sprintf("%.2f", (rec1-rec0)/float64(n)), "", true)
	}
	for _, l := range slices.Sorted(maps.Keys(lastBy)) {
		b.report.add(fmt.Sprintf("P1 (b) breakdown: last %s client's ACK (p50 / p95 / p99; %d drains)", l, len(lastBy[l])), pct(lastBy[l]).String(), "", true)
	}
	b.report.add("P1 (c) drain write to Published True (p50 / p95 / p99)", pc.String(),
		fmt.Sprintf("p99 <= (b) p99 + %s = %s", dur(cSlack), dur(pb.p99+cSlack)), pc.p99 <= pb.p99+cSlack)
	for _, r := range []struct {
		name string
		p    percentiles
	}{{"(b)", pb}, {"(c)", pc}} {
		b.report.add("P1 "+r.name+" ratio to floor (p50 / p99)", fmt.Sprintf("%.1fx / %.1fx", ratio(r.p.p50, fl.p50), ratio(r.p.p99, fl.p99)), "", true)
	}
	for _, l := range slices.Sorted(maps.Keys(bytesBy)) {
		target, met := "", true
		if strings.HasSuffix(l, "delta") {
			target, met = "<= 4 resources", maxResBy[l] <= 4
		}
		b.report.add(fmt.Sprintf("P5 one drain, per %s client (every one, relevant or not): bytes / resources (mean; max resources)", l),
			fmt.Sprintf("%.0f B / %.2f (max %d)", mean(bytesBy[l]), mean(resBy[l]), maxResBy[l]), target, met)
	}
	return nil
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func routeNameOf(i int) string { return mapName(i) + "-global" }

// churn is P4: R drain annotation writes per second for a while, on random maps (writes to
// one map stay in order), then every map's final state is checked everywhere.
func (b *bench) churn(ctx context.Context) error {
	ops := int(b.o.churnFor.Seconds() * float64(b.o.churnRate))
	logf("P4: %d drain writes at %d/s", ops, b.o.churnRate)
	const writers = 16
	queues := make([]chan func() error, writers)
	var wg sync.WaitGroup
	var failed atomic.Value
	for k := range queues {
		queues[k] = make(chan func() error, 1024)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for op := range queues[k] {
				if err := op(); err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, uint64(b.o.maps)))
	cpu0, err := b.pub.cpuSeconds()
	if err != nil {
		return err
	}
	profile := make(chan error, 1)
	go func() {
		profile <- b.pub.profile(ctx, fmt.Sprintf("profile?seconds=%d", int(b.o.churnFor.Seconds())), filepath.Join(b.o.workDir, "cpu-churn.pprof"))
	}()
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(b.o.churnRate))
	touched := map[int]bool{}
	for op := range ops {
		<-tick.C
		i := rng.IntN(b.o.maps)
		in := intent{}
		if rng.IntN(2) == 0 {
			in = intent{id: fmt.Sprintf("churn-%d", op), cluster: rng.IntN(clustersPerMap)}
		}
		b.intents[i], touched[i] = in, true
		value := drainValue(in.id, in.cluster)
		queues[i%writers] <- func() error { return setDrain(ctx, b.c, i, value) }
	}
	tick.Stop()
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	writeEnd := time.Now()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	cpu1, err := b.pub.cpuSeconds()
	if err != nil {
		return err
	}
	window := writeEnd.Sub(start)
	logf("P4: %d writes in %s on %d maps; checking final states", ops, window.Round(time.Millisecond), len(touched))

	var wrong []string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		wrong = b.wrongStates()
		if len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	converged := time.Since(writeEnd)
	if err := <-profile; err != nil {
		logf("churn cpu profile: %v", err)
	}
	cores := (cpu1 - cpu0) / window.Seconds()
	logf("P4: %d wrong final states; converged %s after the last write; publisher CPU %.2f cores", len(wrong), converged.Round(time.Millisecond), cores)
	for _, s := range wrong[:min(len(wrong), 10)] {
		logf("P4 wrong: %s", s)
	}
	b.report.add(fmt.Sprintf("P4 churn: %d drain writes at %d/s on %d maps: lost or wrong final states (route, Published, every xDS client)", ops, b.o.churnRate, len(touched)),
		fmt.Sprintf("%d of %d maps", len(wrong), b.o.maps), "0", len(wrong) == 0)
	b.report.add("P4 last write to every final state correct", dur(converged), "", true)
	b.report.add("P4 publisher CPU during the churn", fmt.Sprintf("%.2f cores (of %d)", cores, b.report.meta.Cores), "", true)
	return b.clientErr()
}

// wrongStates lists every map whose route, Published condition or any xDS client's route
// configuration disagrees with its drain annotation.
func (b *bench) wrongStates() []string {
	var wrong []string
	for i, in := range b.intents {
		want := in.weightsFor()
		route, _ := b.w.routes.get(routeNameOf(i)).(*gwapiv1.HTTPRoute)
		if route == nil || routeWeights(route, i) != want {
			wrong = append(wrong, mapName(i)+": route")
			continue
		}
		tm, _ := b.w.maps.get(mapName(i)).(*v1beta1.TrafficMap)
		if tm == nil || !publishedFor(tm, in) {
			wrong = append(wrong, mapName(i)+": Published")
			continue
		}
		for _, cl := range b.xds {
			if !cl.watches(i) {
				continue
			}
			if got, _ := cl.route(xdsRouteName(i)); got != want {
				wrong = append(wrong, mapName(i)+": xds client "+cl.id)
				break
			}
		}
	}
	return wrong
}

// selfProfile profiles the bench process's CPU into file for at most d; the returned
// function ends it early (and is safe to call after it ended).
func selfProfile(file string, d time.Duration) (func(), error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("bench cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench cpu profile: %w", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
	time.AfterFunc(d, stop)
	return stop, nil
}

// coldTimeline records, for the cold start, when the bench's watches first saw each map's
// route stored, accepted by the gateway and the map Published, and logs them per 2 s: which
// of the three waits on which.
type coldTimeline struct {
	mu                          sync.Mutex
	t0                          time.Time
	stored, accepted, published map[string]time.Duration
}

func newColdTimeline() *coldTimeline {
	return &coldTimeline{stored: map[string]time.Duration{}, accepted: map[string]time.Duration{}, published: map[string]time.Duration{}}
}

func (t *coldTimeline) start(t0 time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t0 = t0
}

// mark records name's first time in m; it returns how many m holds and whether this was
// name's first time.
func (t *coldTimeline) mark(m map[string]time.Duration, name string) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := m[name]; ok || t.t0.IsZero() {
		return len(m), false
	}
	m[name] = time.Since(t.t0)
	return len(m), true
}

// mapPublished records map name seen Published: how many maps were, and whether name
// is new.
func (t *coldTimeline) mapPublished(name string) (int, bool) { return t.mark(t.published, name) }

func (t *coldTimeline) publishedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.published)
}

func (t *coldTimeline) route(obj any) {
	r, ok := obj.(*gwapiv1.HTTPRoute)
	if !ok {
		return
	}
	t.mark(t.stored, r.Name)
	for _, p := range r.Status.Parents {
		if c := meta.FindStatusCondition(p.Conditions, string(gwapiv1.RouteConditionAccepted)); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == r.Generation {
			t.mark(t.accepted, r.Name)
		}
	}
}

// log writes, per 2 s since the publisher started, how many routes were first seen stored,
// accepted, and maps Published, and the median wait from acceptance to Published.
func (t *coldTimeline) log() {
	t.mu.Lock()
	defer t.mu.Unlock()
	const bucket = 2 * time.Second
	counts := map[int][3]int{}
	last := 0
	for i, m := range []map[string]time.Duration{t.stored, t.accepted, t.published} {
		for _, d := range m {
			k := int(d / bucket)
			c := counts[k]
			c[i]++
			counts[k] = c
			last = max(last, k)
		}
	}
	var b strings.Builder
	for k := 0; k <= last; k++ {
		c := counts[k]
		fmt.Fprintf(&b, " %ds:%d/%d/%d", k*2, c[0], c[1], c[2])
	}
	logf("P2 timeline (routes stored/accepted/maps published, per 2 s):%s", b.String())
}

// apiServerProfile saves the API server's CPU profile over d (its /debug/pprof, on by
// default) to file.
func apiServerProfile(ctx context.Context, kube kubernetes.Interface, d time.Duration, file string) error {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("read api server profile: %w", err)
	}
	return os.WriteFile(file, raw, 0o644)
}

// rssTarget is issue 29's resident-memory target for the run's N and mix, and the limit in
// bytes (0: none set for this N and mix).
func (o options) rssTarget() (string, float64) {
	switch {
	case o.maps == 10000 && o.mix == "stress":
		return "<= 1 GiB", 1 << 30
	case o.maps == 10000:
		return "<= 400 MiB (stretch 300)", 400 << 20
	case o.maps == 1000 && o.mix != "stress":
		return "<= 150 MiB", 150 << 20
	}
	return "", 0
}
