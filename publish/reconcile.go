package publish

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/weights"
)

// Reasons of the Published condition. They are part of the publisher's interface: the
// README documents each one.
const (
	ReasonPublished              = "Published"
	ReasonPublishing             = "Publishing"
	ReasonInvalidTrafficMap      = "InvalidTrafficMap"
	ReasonInvalidDrainAnnotation = "InvalidDrainAnnotation"
	ReasonSourceNotFound         = "SourceNotFound"
	ReasonRouteConflict          = "RouteConflict"
	ReasonRouteRefused           = "RouteRefused"
	ReasonRouteNotAccepted       = "RouteNotAccepted"
	ReasonLastPositiveRetained   = "LastPositiveRetained"
	ReasonXDSRejected            = "XDSRejected"
	ReasonXDSInvalid             = "XDSInvalid"
)

// reconcile converges one TrafficMap. It returns an error only for transient failures, which
// the caller retries with backoff; user errors end in the Published condition.
func (p *Publisher) reconcile(ctx context.Context, key cache.ObjectName, log *zap.Logger) error {
	tm, err := p.trafficMap(key.Namespace, key.Name)
	if err != nil {
		return err
	}
	src := httproute.Source{Namespace: key.Namespace, Name: key.Name}
	if tm == nil || tm.DeletionTimestamp != nil {
		p.metrics.forget(key)
		if p.xds != nil {
			p.xds.forgetProgress(key)
		}
		n, err := p.writer.Delete(ctx, src, store{p})
		if n > 0 {
			log.Info("removed published objects of deleted trafficmap", zap.Int("objects", n))
		}
		return err
	}

	st := &statusWriter{p: p, tm: tm, log: log}
	g, err := p.gather(tm)
	var notFound *sourceError
	if errors.As(err, &notFound) {
		return st.fail(ctx, ReasonSourceNotFound, err.Error())
	}
	if err != nil {
		return err
	}
	isvc, src, route := g.isvc, g.src, g.inputs.Route

	// A malformed drain annotation keeps the drain set the route was last built from; with
	// none recorded nothing is published (malformed intent is never "no drains"). Malformed
	// taints or tolerations keep the last valid ones recorded on the route, the same way.
	computed, err := Compute(g.inputs)
	source := fmt.Sprintf("inferenceservice %s/%s", isvc.Namespace, isvc.Name)
	switch {
	case errors.Is(err, ErrNoDrainFallback):
		return st.fail(ctx, ReasonInvalidDrainAnnotation, source+" "+err.Error())
	case errors.Is(err, ErrNoTolerationFallback):
		return st.fail(ctx, ReasonInvalidTolerations, source+" "+err.Error())
	case errors.Is(err, ErrNoTaintFallback):
		return st.fail(ctx, ReasonInvalidTaints, joinLines(err))
	case err != nil:
		return st.fail(ctx, ReasonInvalidTrafficMap, fmt.Sprintf("trafficmap %s/%s is invalid; the published route is left as it was: %s",
			tm.Namespace, tm.Name, joinLines(err)))
	}
	res, drains := computed.Result, computed.Drains
	var drainErr error
	if computed.DrainErr != nil {
		drainErr = fmt.Errorf("%s %w; keeping the last valid drains (%s)", source, computed.DrainErr, describeDrains(drains))
	}
	// inputReason is the reason for the first malformed input (drains, then taints, then
	// tolerations); drainErr then carries every one of them.
	inputReason := ReasonInvalidDrainAnnotation
	var inputErrs []error
	if drainErr != nil {
		inputErrs = append(inputErrs, drainErr)
	}
	if computed.TaintErr != nil {
		if len(inputErrs) == 0 {
			inputReason = ReasonInvalidTaints
		}
		inputErrs = append(inputErrs, computed.TaintErr)
	}
	if computed.TolerationErr != nil {
		if len(inputErrs) == 0 {
			inputReason = ReasonInvalidTolerations
		}
		inputErrs = append(inputErrs, fmt.Errorf("%s %w; keeping the last valid tolerations (%s)", source, computed.TolerationErr, describeTolerations(computed.Tolerations)))
	}
	if len(inputErrs) > 0 {
		drainErr = errors.New(joinLines(errors.Join(inputErrs...)))
	}

	var confirms []string
	if p.cfg.sinkOn(SinkHTTPRoute) {
		confirm, done, err := p.publishRoute(ctx, st, log, tm, src, route, computed, drainErr)
		if !done {
			return err
		}
		p.metrics.sinkConfirmed(key, SinkHTTPRoute)
		confirms = append(confirms, confirm)
	}
	if p.xds != nil {
		svc := p.xdsView(tm, src, res)
		if err := p.xds.invalidErr(svc.Key()); err != nil {
			return st.fail(ctx, ReasonXDSInvalid, fmt.Sprintf("xds sink cannot serve trafficmap %s: %s; its last good resources stay served",
				svc.Key(), joinLines(err)))
		}
		c := p.xds.confirm(svc)
		switch {
		case c.Nack != nil:
			return st.fail(ctx, ReasonXDSRejected, c.Message)
		case !c.Done && p.cfg.RequireXDSAck:
			if wait := p.xds.holdProgress(key, st.tm, c.Message, time.Now()); wait > 0 {
				p.queue.AddAfter(key, wait) // the count is rewritten then, if still waiting
				return nil
			}
			return st.write(ctx, st.publishing(c.Message))
		}
		if c.Done {
			p.metrics.sinkConfirmed(key, SinkXDS)
		}
		confirms = append(confirms, c.Message)
	}

	msg := strings.Join(confirms, "; ") + "; weights " + describeWeights(res)
	if res.AllZero() {
		msg += "; every effective weight is 0, so no traffic is routed (--no-positive-policy ApplyCurrent)"
	}
	if len(res.Pending) > 0 {
		msg += "; pending drains (no such entry): " + describeDrains(res.Pending)
	}
	if drainErr != nil {
		return st.fail(ctx, inputReason, msg+"; but "+drainErr.Error())
	}
	return st.write(ctx, st.published(msg))
}

// publishRoute is the HTTPRoute sink's part of a reconcile: it stores the route and its
// Services and reads the gateway's verdict. It returns the confirmation for the message and
// done; when done is false it has already written the status that explains why (or failed
// transiently) and the reconcile ends with the returned error.
func (p *Publisher) publishRoute(ctx context.Context, st *statusWriter, log *zap.Logger, tm *v1beta1.TrafficMap,
	src httproute.Source, route *gwapiv1.HTTPRoute, computed Computed, drainErr error,
) (confirm string, done bool, err error) {
	res := computed.Result
	recorded := recordedFleet(computed)
	desired, err := httproute.Build(p.sink, src, res, httproute.Inputs{Generation: tm.Generation, Drains: computed.Drains,
		Taints: recorded.Taints, Tolerations: recorded.Tolerations})
	if err != nil {
		return "", false, st.fail(ctx, ReasonRouteRefused, fmt.Sprintf("httproute sink cannot publish trafficmap %s/%s: %s", tm.Namespace, tm.Name, err))
	}

	retain := res.AllZero() && p.cfg.NoPositivePolicy == RetainLastPositive && hasPositiveWeight(route)
	if !retain && !st.current(route, desired) {
		// Say "not yet" before touching anything, so PUBLISHED is never stale.
		if err := st.announce(ctx, "publishing weights "+describeWeights(res)); err != nil {
			return "", false, err
		}
	}
	if retain {
		weightsKept, _ := httproute.RouteWeights(route)
		msg := fmt.Sprintf("every effective weight is 0 (%s); --no-positive-policy RetainLastPositive keeps the last positive weights on route %s/%s (%s)",
			describeWeights(res), route.Namespace, route.Name, describeRouteWeights(weightsKept))
		return "", false, st.fail(ctx, ReasonLastPositiveRetained, withDrainError(msg, drainErr))
	}

	synced, err := p.writer.Sync(ctx, src, desired, store{p})
	if errors.Is(err, httproute.ErrConflict) {
		return "", false, st.fail(ctx, ReasonRouteConflict, err.Error())
	}
	if err != nil {
		return "", false, fmt.Errorf("sync httproute: %w", err)
	}
	p.metrics.routeWritten(synced.Writes)
	if synced.Writes > 0 {
		log.Info("stored route", zap.String("httproute", desired.Route.Namespace+"/"+desired.Route.Name),
			zap.Int("writes", synced.Writes), zap.String("weights", describeWeights(res)))
	}
	st.route = synced.Route

	if !p.cfg.RequireRouteAccepted {
		return "route " + synced.Route.Namespace + "/" + synced.Route.Name + " stored (gateway acceptance not required)", true, nil
	}
	acc := p.sink.Acceptance(synced.Route)
	switch acc.Verdict {
	case httproute.Pending:
		return "", false, st.write(ctx, st.publishing(acc.Message))
	case httproute.Rejected:
		return "", false, st.fail(ctx, ReasonRouteNotAccepted, acc.Message)
	}
	return acc.Message, true, nil
}

// gathered is everything one map's effective weights are computed from, read from the
// caches: the reconcile and the xDS snapshot both use it, so they cannot disagree.
type gathered struct {
	isvc   *metav1.PartialObjectMetadata
	src    httproute.Source
	inputs Inputs // Route is the publisher's own route, or nil
}

// sourceError is a missing or replaced source InferenceService: a user-visible condition.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// gather reads the map's inputs from the caches. A foreign route at the map's route name
// is not trusted: Inputs.Route is then nil (and the HTTPRoute sink refuses the name).
func (p *Publisher) gather(tm *v1beta1.TrafficMap) (gathered, error) {
	isvc, err := p.source(tm)
	if err != nil {
		return gathered{}, &sourceError{err}
	}
	src := httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service,
		GlobalHost: strings.TrimSpace(isvc.Annotations[v1beta1.AnnotationGlobalHost])}
	route, err := store{p}.Route(tm.Namespace, httproute.RouteName(tm.Name))
	if err != nil {
		return gathered{}, err
	}
	if route != nil && !httproute.Owned(route.Labels, src) {
		route = nil
	}
	clusters, err := p.clusterTaints(tm)
	if err != nil {
		return gathered{}, err
	}
	return gathered{isvc: isvc, src: src, inputs: Inputs{TrafficMap: tm, SourceAnnotations: isvc.Annotations, Route: route, Clusters: clusters}}, nil
}

// source returns the InferenceService the map names, checking status.sourceUID when set.
func (p *Publisher) source(tm *v1beta1.TrafficMap) (*metav1.PartialObjectMetadata, error) {
	isvc, err := p.inferenceService(tm.Namespace, tm.Spec.Service)
	if err != nil {
		return nil, err
	}
	if isvc == nil {
		return nil, fmt.Errorf("inferenceservice %s/%s named by trafficmap %s/%s spec.service does not exist; the published route is left as it was",
			tm.Namespace, tm.Spec.Service, tm.Namespace, tm.Name)
	}
	if tm.Status.SourceUID != "" && tm.Status.SourceUID != isvc.UID {
		return nil, fmt.Errorf("inferenceservice %s/%s has uid %s but trafficmap %s/%s status.sourceUID is %s; waiting for the routing controller",
			isvc.Namespace, isvc.Name, isvc.UID, tm.Namespace, tm.Name, tm.Status.SourceUID)
	}
	return isvc, nil
}

func hasPositiveWeight(route *gwapiv1.HTTPRoute) bool {
	_, positive := httproute.RouteWeights(route)
	return positive
}

func withDrainError(msg string, drainErr error) string {
	if drainErr == nil {
		return msg
	}
	return msg + "; " + drainErr.Error()
}

// describeWeights renders effective weights as "worker-a=0 (drained by m-a), worker-b=1",
// with the taints holding an entry after its drains:
// "worker-a=0 (drained by m-a; taint maintenance=planned:NoExecute)".
func describeWeights(res weights.Result) string {
	if len(res.Entries) == 0 {
		return "(no entries)"
	}
	parts := make([]string, 0, len(res.Entries))
	for _, e := range res.Entries {
		s := fmt.Sprintf("%s=%d", e.Cluster, e.Effective)
		if e.Drained() {
			var holds []string
			if len(e.HeldBy) > 0 {
				holds = append(holds, "drained by "+strings.Join(e.HeldBy, ","))
			}
			if len(e.Taints) > 0 {
				holds = append(holds, "taint "+describeTaints(e.Taints))
			}
			s += " (" + strings.Join(holds, "; ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func describeDrains(drains []weights.Drain) string {
	if len(drains) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(drains))
	for _, d := range drains {
		parts = append(parts, d.ID+" on "+d.Cluster)
	}
	return strings.Join(parts, ", ")
}

func describeRouteWeights(w map[string]int32) string {
	parts := make([]string, 0, len(w))
	for _, name := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s=%d", name, w[name]))
	}
	return strings.Join(parts, ", ")
}

// joinLines flattens a joined error onto one line for a condition message.
func joinLines(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
