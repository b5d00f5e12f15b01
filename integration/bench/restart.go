package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"time"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// restart is P6, a restart of the publisher (a rollout, or an OOM kill's restart) with the
// fleet published: the old process stops (SIGINT, as a pod's termination sends SIGTERM), a
// new one starts with the same flags and memory limit, and every xDS client reconnects to
// it stating what it holds (Envoy's way: per type the last ACKed version, or over delta
// each resource's version). It reports the new process's peak resident memory, how long
// until it has settled (every client reconnected, every map Published True, no reconcile
// for 10 s), what each client received meanwhile against the final configuration, and
// whether any map left Published True or any client's routes changed: a restart must
// change nothing.
func (b *bench) restart(ctx context.Context, bin, kubeconfig string) error {
	before := map[*xdsClient]map[string]string{}
	since := map[*xdsClient]received{}
	for _, cl := range b.xds {
		cl.mu.Lock()
		before[cl] = maps.Clone(cl.routes)
		cl.mu.Unlock()
		since[cl] = received{bytes: cl.bytes.Load(), responses: cl.responses.Load()}
		cl.retarget("")
		cl.dropping.Store(true)
	}
	final := b.envoyConfigBytes()

	var mu sync.Mutex
	left := map[string]bool{} // maps seen not Published True during the restart
	b.w.maps.setOnEvent(func(obj any) {
		if tm, ok := obj.(*v1beta1.TrafficMap); ok && !isPublished(tm) {
			mu.Lock()
			left[tm.Name] = true
			mu.Unlock()
		}
	})
	defer b.w.maps.setOnEvent(nil)

	logf("P6: stopping the publisher")
	b.pub.stop()
	logf("P6: starting a new publisher")
	start := time.Now()
	pub, err := startPublisher(bin, kubeconfig, filepath.Join(b.o.workDir, "publisher-restart.log"), b.o)
	if err != nil {
		return err
	}
	b.pub = pub
	for _, cl := range b.xds {
		cl.retarget(pub.xdsAddr)
	}
	settled, err := b.settle(ctx, start, 10*time.Second, time.Duration(b.o.maps)*20*time.Millisecond+3*time.Minute)
	if err != nil {
		return err
	}
	for _, cl := range b.xds {
		cl.dropping.Store(false)
	}
	ms, err := b.pub.rss()
	if err != nil {
		return err
	}

	changed, redials := 0, int64(0)
	for _, cl := range b.xds {
		redials += cl.redials.Load()
		cl.mu.Lock()
		if !maps.Equal(before[cl], cl.routes) {
			changed++
		}
		cl.mu.Unlock()
	}
	got := b.received(since, final)
	mu.Lock()
	nLeft := len(left)
	mu.Unlock()
	logf("P6: settled %s after the new publisher started; peak %s; maps that left Published True %d; clients whose routes changed %d; streams opened %d for %d clients; received %s",
		dur(settled), mib(float64(ms.peak)), nLeft, changed, redials, len(b.xds), got)
	b.report.add("P6 restart with the fleet published: new process start to settled (every client reconnected, every map Published True, then no reconcile for 10 s, not counted)", dur(settled), "", true)
	b.report.add("P6 restart: the new process's peak resident memory (VmHWM) / resident once settled", mib(float64(ms.peak))+" / "+mib(float64(ms.rss)), "", true)
	b.report.add("P6 restart: what each xDS client received from the new process until settled, per client of each kind (mean): bytes / responses", got, "", true)
	b.report.add("P6 restart: maps that left Published True / clients whose routes changed / streams opened to the new process beyond one per client (a stream refused or ended)",
		fmt.Sprintf("%d / %d / %d", nLeft, changed, redials-int64(len(b.xds))), "0 / 0 / 0", nLeft == 0 && changed == 0 && redials == int64(len(b.xds)))
	return b.clientErr()
}

// settle waits until the new publisher serves every client, every map is Published True
// and its reconcile count has not moved for quiet; it returns the time from start to the
// beginning of that quiet stretch.
func (b *bench) settle(ctx context.Context, start time.Time, quiet, timeout time.Duration) (time.Duration, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last float64
	var since time.Time // when the current quiet stretch began; zero while not ready
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-b.pub.done:
			return 0, fmt.Errorf("P6: the new publisher exited: %v", b.pub.err)
		case <-tick.C:
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("P6: not settled within %s", timeout)
		}
		m, err := b.pub.metrics()
		if err != nil {
			continue // not serving its HTTP port yet
		}
		n, err := b.reconciles()
		if err != nil {
			continue
		}
		if int(sum(m, "trafficmap_publisher_xds_streams")) != len(b.xds) || b.publishedMaps() != b.o.maps {
			since = time.Time{}
			continue
		}
		if since.IsZero() || n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return since.Sub(start), nil
		}
	}
}

// publishedMaps counts the maps the bench's watch sees Published True.
func (b *bench) publishedMaps() int {
	n := 0
	for _, obj := range b.w.maps.inf.GetStore().List() {
		if tm, ok := obj.(*v1beta1.TrafficMap); ok && isPublished(tm) {
			n++
		}
	}
	return n
}
