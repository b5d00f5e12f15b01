package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// clusters are the seed's workload clusters.
var clusters = []string{"worker-a", "worker-b"}

// expect is a published state to wait for.
type expect struct {
	// generation is the TrafficMap generation Published must be True at; 0 means the
	// current one, whatever it is.
	generation int64
	// weights are the route's backend weights by cluster.
	weights map[string]int32
	// noRecordedDrains requires the route's recorded drain set to be empty.
	noRecordedDrains bool
}

// poll calls cond every pollInterval until it reports done, the publisher exits or
// waitTimeout passes. An error from cond (a failed read) does not end the wait; the last one
// goes into the timeout error with what was awaited (what) and what was last seen (last).
func (d *demo) poll(ctx context.Context, what string, cond func(context.Context) (bool, error), last func() string) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if d.pub != nil {
			if err := d.pub.check(); err != nil {
				return false, err
			}
		}
		done, err := cond(ctx)
		if err != nil {
			lastErr = err
		}
		return done, nil
	})
	if err != nil {
		seen := last()
		if lastErr != nil {
			seen += "; last read error: " + lastErr.Error()
		}
		return fmt.Errorf("waiting for %s (timeout %s); last seen: %s: %w", what, waitTimeout, seen, err)
	}
	return nil
}

// waitPublished waits until Published is True (reason Published, status.published true) at
// the current, or the expected, TrafficMap generation and the route holds the expected
// weights. It returns the map as last read.
func (d *demo) waitPublished(ctx context.Context, want expect) (*v1beta1.TrafficMap, error) {
	var tm *v1beta1.TrafficMap
	var route *gwapiv1.HTTPRoute
	what := "Published=True with route weights " + formatWeights(want.weights)
	if want.generation > 0 {
		what = fmt.Sprintf("%s at TrafficMap generation %d", what, want.generation)
	}
	err := d.poll(ctx, what, func(ctx context.Context) (bool, error) {
		gotMap, err := d.tmc.OmeV1beta1().TrafficMaps(namespace).Get(ctx, service, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get trafficmap: %w", err)
		}
		gotRoute, err := d.route(ctx)
		if err != nil {
			return false, err
		}
		tm, route = gotMap, gotRoute
		c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(model.ReasonPublished) ||
			c.ObservedGeneration != tm.Generation || !tm.Status.Published {
			return false, nil
		}
		if want.generation > 0 && tm.Generation != want.generation {
			return false, nil
		}
		if route == nil || !maps.Equal(routeWeights(route), want.weights) {
			return false, nil
		}
		if want.noRecordedDrains {
			if drains, ok := httproute.RecordedDrains(route); !ok || len(drains) > 0 {
				return false, nil
			}
		}
		return true, nil
	}, func() string { return describe(tm, route) })
	return tm, err
}

// waitRemoved waits until the TrafficMap is gone and the publisher removed its route and
// backend Services.
func (d *demo) waitRemoved(ctx context.Context) error {
	var left []string
	return d.poll(ctx, "the TrafficMap, its HTTPRoute and its backend Services to be removed", func(ctx context.Context) (bool, error) {
		var now []string
		if _, err := d.tmc.OmeV1beta1().TrafficMaps(namespace).Get(ctx, service, metav1.GetOptions{}); err == nil {
			now = append(now, "trafficmap/"+service)
		} else if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("get trafficmap: %w", err)
		}
		route, err := d.route(ctx)
		if err != nil {
			return false, err
		}
		if route != nil {
			now = append(now, "httproute/"+route.Name)
		}
		svcs, err := d.ownedServices(ctx)
		if err != nil {
			return false, err
		}
		for _, s := range svcs {
			now = append(now, "service/"+s.Name)
		}
		left = now
		return len(now) == 0, nil
	}, func() string { return strings.Join(left, ", ") })
}

// route returns the publisher's HTTPRoute chat-global, or nil when there is none.
func (d *demo) route(ctx context.Context) (*gwapiv1.HTTPRoute, error) {
	r, err := d.gw.GatewayV1().HTTPRoutes(namespace).Get(ctx, httproute.RouteName(service), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get httproute: %w", err)
	}
	return r, nil
}

// ownedServices lists the backend Services the publisher owns for the TrafficMap.
func (d *demo) ownedServices(ctx context.Context) ([]corev1.Service, error) {
	list, err := d.kube.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: ownedSelector})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	return list.Items, nil
}

// ownedSelector selects what the publisher created for TrafficMap prod/chat.
var ownedSelector = httproute.LabelManagedBy + "=" + httproute.ManagedByValue + "," + httproute.LabelSourceName + "=" + service

// routeWeights returns the route's backend weights keyed by cluster (by backend Service
// name when it is not one of the seed's clusters).
func routeWeights(route *gwapiv1.HTTPRoute) map[string]int32 {
	byName := map[string]string{}
	for _, c := range clusters {
		byName[httproute.ServiceName(namespace, service, c)] = c
	}
	stored, _ := httproute.RouteWeights(route)
	out := map[string]int32{}
	for name, w := range stored {
		if c, ok := byName[name]; ok {
			name = c
		}
		out[name] = w
	}
	return out
}

// formatWeights renders weights as "worker-a=0, worker-b=1".
func formatWeights(w map[string]int32) string {
	parts := make([]string, 0, len(w))
	for _, k := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, w[k]))
	}
	return strings.Join(parts, ", ")
}

// describe renders the Published condition and the route weights for an error message.
func describe(tm *v1beta1.TrafficMap, route *gwapiv1.HTTPRoute) string {
	if tm == nil {
		return "no TrafficMap read yet"
	}
	s := fmt.Sprintf("TrafficMap generation %d, Published %s", tm.Generation, publishedKey(tm))
	if c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished); c != nil {
		s += " (" + c.Message + ")"
	}
	if route == nil {
		return s + "; no route"
	}
	return s + "; route weights " + formatWeights(routeWeights(route))
}

// publishedKey renders the Published condition as "True/Published observedGeneration=2".
func publishedKey(tm *v1beta1.TrafficMap) string {
	c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
	if c == nil {
		return "no Published condition"
	}
	return fmt.Sprintf("%s/%s observedGeneration=%d", c.Status, c.Reason, c.ObservedGeneration)
}

// publishedWatch records each distinct Published condition a watch on the TrafficMap sees.
type publishedWatch struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	seen   []string // distinct consecutive publishedKey values, the first one from before the change
}

// watchPublished starts recording Published transitions from the map's current state on.
func (d *demo) watchPublished(ctx context.Context) (*publishedWatch, error) {
	tm, err := d.tmc.OmeV1beta1().TrafficMaps(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get trafficmap: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := d.tmc.OmeV1beta1().TrafficMaps(namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + service, ResourceVersion: tm.ResourceVersion,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch trafficmap: %w", err)
	}
	pw := &publishedWatch{cancel: cancel, seen: []string{publishedKey(tm)}}
	go func() { // ends when stop cancels the watch's context
		defer w.Stop()
		for ev := range w.ResultChan() {
			if tm, ok := ev.Object.(*v1beta1.TrafficMap); ok {
				pw.record(publishedKey(tm))
			}
		}
	}()
	return pw, nil
}

// record appends key unless it equals the last one seen.
func (pw *publishedWatch) record(key string) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.seen[len(pw.seen)-1] != key {
		pw.seen = append(pw.seen, key)
	}
}

// snapshot returns the keys seen so far.
func (pw *publishedWatch) snapshot() []string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return slices.Clone(pw.seen)
}

// stop ends the watch.
func (pw *publishedWatch) stop() { pw.cancel() }

// report waits until the watch has delivered Published True at generation, prints every
// transition seen and checks that PUBLISHED went False before it came back True.
func (pw *publishedWatch) report(ctx context.Context, generation int64) error {
	final := fmt.Sprintf("%s/%s observedGeneration=%d", metav1.ConditionTrue, model.ReasonPublished, generation)
	err := wait.PollUntilContextTimeout(ctx, pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		seen := pw.snapshot()
		return seen[len(seen)-1] == final, nil
	})
	seen := pw.snapshot()
	if err != nil {
		return fmt.Errorf("waiting for the watch to deliver %q (timeout %s); seen: %s: %w", final, waitTimeout, strings.Join(seen, " -> "), err)
	}
	fmt.Println("Published condition as a watch on trafficmap prod/chat saw it change (status/reason):")
	for i, k := range seen {
		note := ""
		if i == 0 {
			note = "   (before the change)"
		}
		fmt.Printf("  %s%s\n", k, note)
	}
	for _, k := range seen[1:] {
		if strings.HasPrefix(k, string(metav1.ConditionFalse)) {
			return nil
		}
	}
	return errors.New("PUBLISHED never went False while the change was published")
}
