package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// The monitor's caches are informers, and an informer can fall behind the API server for
// long: after an API server restart its watch is re-established on the reflector's backoff
// (one 30-minute run saw every cache 38 s behind, and called ten Trues the publisher had
// retracted 38 s earlier lies, the probes' live records against the caches' stale maps). So
// an episode that has run past its least bound (retractWithin for a True, stuckWithin for
// a stuck map) counts only once the monitor has read the map, its InferenceService, its
// routes and the WorkloadClusters from the API server and found its caches at the same
// resourceVersions. Otherwise the episode is dropped, a counted skip: the next tick judges
// from the caches again and, while the disagreement (or the agreement) lasts, begins a new
// episode, which is checked in its turn. A lie that stands is so caught one bound later.

// skipCacheBehind counts the episodes dropped because the monitor's caches were behind.
const skipCacheBehind = "the judge's caches behind the API server (episode dropped, judged again)"

// checkKey names an open episode for the freshness check: its kind, map and start.
type checkKey struct {
	kind, m string
	start   time.Time
}

// due returns the open episodes past their least bound that have not been checked.
func (t *tracker) due(now time.Time) []checkKey {
	var out []checkKey
	for _, e := range t.open {
		least := retractWithin
		if e.Kind == episodeStuck {
			least = stuckWithin
		}
		k := checkKey{e.Kind, e.Map, e.Start}
		if now.Sub(e.Start) > least && !t.checked[k] {
			out = append(out, k)
		}
	}
	return out
}

// checkedFresh records that k's caches were found current: it counts as it runs.
func (t *tracker) checkedFresh(k checkKey) { t.checked[k] = true }

// drop forgets the open episode k, whose judgement came from caches behind the API server,
// as a counted skip.
func (t *tracker) drop(k checkKey) {
	if e, ok := t.open[k.kind+" "+k.m]; ok && e.Start.Equal(k.start) {
		delete(t.open, k.kind+" "+k.m)
		delete(t.checked, k)
		t.skips[skipCacheBehind]++
	}
}

// check runs the freshness check of the due episodes (outside the lock: it reads the API
// server) and applies its answers.
func (m *monitor) check(ctx context.Context, now time.Time) {
	m.mu.Lock()
	due := m.tr.due(now)
	m.mu.Unlock()
	for _, k := range due {
		current, err := m.current(ctx, k.m)
		if err != nil {
			continue // unread: checked again on the next tick
		}
		m.mu.Lock()
		if current {
			m.tr.checkedFresh(k)
		} else {
			m.tr.drop(k)
		}
		m.mu.Unlock()
	}
}

// current reports whether the monitor's caches hold the map key ("namespace/name"), its
// InferenceService, its routes and every WorkloadCluster at the resourceVersions the API
// server has now.
func (m *monitor) current(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ns, name, _ := strings.Cut(key, "/")
	cfg := m.chk.cfg
	live, err := cfg.OME.OmeV1beta1().TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get trafficmap %s: %w", key, err)
	}
	if cachedRV(m.tms, key) != live.ResourceVersion {
		return false, nil
	}
	isvc, err := cfg.Dynamic.Resource(isvcResource).Namespace(ns).Get(ctx, live.Spec.Service, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if cachedRV(m.isvcs, ns+"/"+live.Spec.Service) != "" {
			return false, nil
		}
	case err != nil:
		return false, fmt.Errorf("get inferenceservice %s/%s: %w", ns, live.Spec.Service, err)
	case cachedRV(m.isvcs, ns+"/"+live.Spec.Service) != isvc.GetResourceVersion():
		return false, nil
	}
	routes, err := cfg.Gateway.GatewayV1().HTTPRoutes(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labelSourceNamespace + "=" + ns + "," + labelSourceName + "=" + name})
	if err != nil {
		return false, fmt.Errorf("list httproutes of %s: %w", key, err)
	}
	for _, r := range routes.Items {
		if cachedRV(m.routes, ns+"/"+r.Name) != r.ResourceVersion {
			return false, nil
		}
	}
	wcs, err := cfg.Dynamic.Resource(wcResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("list workloadclusters: %w", err)
	}
	for _, wc := range wcs.Items {
		if cachedRV([]cache.Store{m.wcs}, wc.GetName()) != wc.GetResourceVersion() {
			return false, nil
		}
	}
	return true, nil
}

// cachedRV is the resourceVersion of the object at key in the first of stores that holds
// it, "" when none does.
func cachedRV(stores []cache.Store, key string) string {
	for _, s := range stores {
		if o, ok, err := s.GetByKey(key); err == nil && ok {
			if acc, ok := o.(interface{ GetResourceVersion() string }); ok {
				return acc.GetResourceVersion()
			}
		}
	}
	return ""
}
