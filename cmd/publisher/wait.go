package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/drain"
	"github.com/trafficmap/publisher/report"
)

// errWaitTimeout ends a --wait that ran out of time (exitWaitTimeout).
var errWaitTimeout = errors.New("timed out waiting for the publisher")

// waitPublished polls the TrafficMap named as the plan's target and its objects until the
// change is published (published), for at most d.
func waitPublished(ctx context.Context, kc kube, plan *drain.Plan, flip drain.Flip, d time.Duration, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	rc := rest.CopyConfig(kc.rest)
	rc.QPS, rc.Burst = waitQPS, 2*waitQPS // one poll makes 4 + 2 per entry requests
	r, err := newReader(kube{rest: rc}, report.Reader{NoHostnames: true})
	if err != nil {
		return 0, err
	}
	ns, name := plan.Target.Namespace, plan.Target.Name
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	reason := "nothing read yet" // why the change is not published, as last decided
	var lastErr error            // the last read's error, when it failed
	for {
		lastErr = nil
		tm, err := r.Maps.OmeV1beta1().TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case ctx.Err() != nil:
		case apierrors.IsNotFound(err):
			return 0, fmt.Errorf("trafficmap %s/%s not found: no trafficmap publishes the service, there is nothing to wait for", ns, name)
		case apierrors.IsForbidden(err):
			return 0, fmt.Errorf("forbidden: cannot get trafficmaps.ome.io in namespace %s; --wait needs what status needs: %s", ns, report.Needs)
		case err != nil:
			lastErr = err
		default:
			st, err := r.StatusOf(ctx, tm)
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, report.ErrForbidden):
				return 0, err
			case err != nil:
				lastErr = err
			default:
				var done bool
				if reason, done = published(tm, st, plan, flip); done {
					fmt.Fprintf(stderr, "Published: %s\n", reason)
					return exitOK, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, ctx.Err()
			}
			if lastErr != nil {
				reason += fmt.Sprintf(" (the last read failed: %v)", lastErr)
			}
			return 0, fmt.Errorf("%w after %s: %s", errWaitTimeout, d, reason)
		case <-tick.C:
		}
	}
}

// published decides from typed data whether the plan's change is published: the Published
// condition is True at the map's generation and was written after the flip: the map's
// resourceVersion is no longer the flip's (without a flip, the one read before the patch),
// and as the flip stored False, a True there is a transition made after it. Its
// lastTransitionTime is set by the publisher's clock and is not compared with the flip's,
// set by this machine's, so clock skew cannot hold the wait. Then the drain set in effect
// has (drain) or lacks (undrain) the plan's drain, and report.Check finds the route's
// weights equal to the effective weights publish.Compute gives. It returns the condition's
// message when done, else what is missing.
func published(tm *v1beta1.TrafficMap, st report.Status, plan *drain.Plan, flip drain.Flip) (string, bool) {
	inEffect := false
	for _, d := range st.Drains.InEffect {
		inEffect = inEffect || d.ID == plan.Request.ID && d.Cluster == plan.Cluster
	}
	if want := plan.Request.Action == drain.ActionDrain; inEffect != want {
		return fmt.Sprintf("the drain set in effect does not match the %s of %s", plan.Request.Action, plan.Request.ID), false
	}
	c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
	switch {
	case c == nil:
		return "the trafficmap has no Published condition", false
	case c.Status != metav1.ConditionTrue:
		return fmt.Sprintf("published is %s (%s): %s", c.Status, c.Reason, c.Message), false
	case c.ObservedGeneration != tm.Generation:
		return fmt.Sprintf("published at generation %d, the trafficmap is at generation %d", c.ObservedGeneration, tm.Generation), false
	case flip.Map != nil && tm.ResourceVersion == flip.Map.ResourceVersion:
		return "the publisher has not written the status since the change", false
	}
	if err := report.Check(st); err != nil {
		return err.Error(), false
	}
	return c.Message, true
}
