package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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
	return waitMaps(ctx, kc, []waitTarget{{
		namespace: plan.Target.Namespace, name: plan.Target.Name,
		done: func(tm *v1beta1.TrafficMap, st report.Status) (string, bool) { return published(tm, st, plan, flip) },
	}}, d, stderr)
}

// waitTarget is one TrafficMap --wait waits for: done decides from the map and its status
// whether the change is published there, and says what is missing when not.
type waitTarget struct {
	namespace, name string
	done            func(tm *v1beta1.TrafficMap, st report.Status) (string, bool)
}

// waitMaps polls every target's TrafficMap and its objects until each is done, for at most
// d in all; a map once done is not read again. Each published map is reported on stderr.
func waitMaps(ctx context.Context, kc kube, targets []waitTarget, d time.Duration, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	rc := rest.CopyConfig(kc.rest)
	rc.QPS, rc.Burst = waitQPS, 2*waitQPS // one poll makes 4 + 2 per entry requests per map
	r, err := newReader(kube{rest: rc}, report.Reader{NoHostnames: true})
	if err != nil {
		return 0, err
	}
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	pending := slices.Clone(targets)
	reason := "nothing read yet" // why the first pending change is not published, as last decided
	for {
		var still []waitTarget
		for _, w := range pending {
			why, done, err := waitOnce(ctx, r, w)
			switch {
			case err != nil:
				return 0, err
			case done:
				prefix := ""
				if len(targets) > 1 {
					prefix = w.namespace + "/" + w.name + " "
				}
				fmt.Fprintf(stderr, "%sPublished: %s\n", prefix, why)
			default:
				if len(still) == 0 && why != "" {
					reason = why
					if len(targets) > 1 {
						reason = w.namespace + "/" + w.name + ": " + why
					}
				}
				still = append(still, w)
			}
		}
		if pending = still; len(pending) == 0 {
			return exitOK, nil
		}
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("%w after %s: %s", errWaitTimeout, d, reason)
		case <-tick.C:
		}
	}
}

// waitOnce reads w's map and status once: done and the condition's message when the change
// is published there; else what is missing ("" when the context ended mid-read), a failed
// read saying so. A missing map or a refused read is fatal.
func waitOnce(ctx context.Context, r report.Reader, w waitTarget) (string, bool, error) {
	tm, err := r.Maps.OmeV1beta1().TrafficMaps(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
	switch {
	case ctx.Err() != nil:
		return "", false, nil
	case apierrors.IsNotFound(err):
		return "", false, fmt.Errorf("trafficmap %s/%s not found: no trafficmap publishes the service, there is nothing to wait for", w.namespace, w.name)
	case apierrors.IsForbidden(err):
		return "", false, fmt.Errorf("forbidden: cannot get trafficmaps.ome.io in namespace %s; --wait needs what status needs: %s", w.namespace, report.Needs)
	case err != nil:
		return fmt.Sprintf("not published yet (the last read failed: %v)", err), false, nil
	}
	st, err := r.StatusOf(ctx, tm)
	switch {
	case ctx.Err() != nil:
		return "", false, nil
	case errors.Is(err, report.ErrForbidden):
		return "", false, err
	case err != nil:
		return fmt.Sprintf("not published yet (the last read failed: %v)", err), false, nil
	}
	why, done := w.done(tm, st)
	return why, done, nil
}

// published decides from typed data whether the plan's change is published: the Published
// condition is True at the map's generation and was written after the flip: the map's
// resourceVersion is no longer the flip's (without a flip, the one read before the patch),
// and as the flip stored False, a True there is a transition made after it. Its
// lastTransitionTime is set by the publisher's clock and is not compared with the flip's,
// set by this machine's, so clock skew cannot hold the wait. Then the drain set in effect
// has (drain) or lacks (undrain) the plan's drain, and report.Check finds the route's
// weights equal to the effective weights model.Compute gives. It returns the condition's
// message when done, else what is missing.
func published(tm *v1beta1.TrafficMap, st report.Status, plan *drain.Plan, flip drain.Flip) (string, bool) {
	inEffect := false
	for _, d := range st.Drains.InEffect {
		inEffect = inEffect || d.ID == plan.Request.ID && d.Cluster == plan.Cluster
	}
	if want := plan.Request.Action == drain.ActionDrain; inEffect != want {
		return fmt.Sprintf("the drain set in effect does not match the %s of %s", plan.Request.Action, plan.Request.ID), false
	}
	return conditionPublished(tm, st, flip)
}

// conditionPublished decides whether tm's Published condition is True at its generation,
// written after the flip, and report.Check finds the route's weights equal to the computed
// effective weights: the condition's message when done, else what is missing.
func conditionPublished(tm *v1beta1.TrafficMap, st report.Status, flip drain.Flip) (string, bool) {
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
