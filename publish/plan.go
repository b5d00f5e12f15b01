package publish

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// Step 2 of the pipeline: plan. planMap is pure: from the gathered inputs it computes the
// effective weights (Compute) and the sink-neutral plan every sink translates, and
// classifies malformed input.

// userError is a user error: Published False with reason and message and a Warning Event,
// no retry (the next change to the inputs reconciles again). Nothing is published.
type userError struct {
	reason, message string
}

func (e *userError) Error() string { return e.reason + ": " + e.message }

// planned is the outcome of the plan step for one map.
type planned struct {
	plan     model.Plan
	computed Computed
	// inputReason and inputErr describe malformed inputs that fell back to the last valid
	// state recorded on the route: the plan is published, but Published says False with
	// inputReason so the operator learns the input was not taken.
	inputReason string
	inputErr    error
	// self is the map's claim; claimable are its names no one holds that its journal does
	// not hold yet (Ownership.Claimable): the pipeline journals them before any sink
	// serves them.
	self      Claim
	claimable []string
}

// hostnamer derives a map's hostname (httproute.Config.Hostname).
type hostnamer interface {
	Hostname(src httproute.Source) (string, error)
}

// planMap makes the plan for the gathered map. A *userError means nothing can be published.
func planMap(hosts hostnamer, g gathered) (*planned, error) {
	tm := g.inputs.TrafficMap
	computed, err := Compute(g.inputs)
	source := fmt.Sprintf("inferenceservice %s/%s", g.isvc.Namespace, g.isvc.Name)
	switch {
	case errors.Is(err, ErrNoDrainFallback):
		return nil, &userError{ReasonInvalidDrainAnnotation, source + " " + err.Error()}
	case errors.Is(err, ErrNoTolerationFallback):
		return nil, &userError{ReasonInvalidTolerations, source + " " + err.Error()}
	case errors.Is(err, ErrNoTaintFallback):
		return nil, &userError{ReasonInvalidTaints, joinLines(err)}
	case errors.Is(err, weights.ErrInvalidRamp):
		return nil, &userError{ReasonInvalidRamp, source + " " + err.Error() + "; the published weights are left as they were"}
	case err != nil:
		return nil, &userError{ReasonInvalidTrafficMap, fmt.Sprintf("trafficmap %s/%s is invalid; the published route is left as it was: %s",
			tm.Namespace, tm.Name, joinLines(err))}
	}
	pl := &planned{computed: computed, plan: model.Plan{
		Namespace: tm.Namespace, Name: tm.Name, UID: string(tm.UID), Generation: tm.Generation,
		Service: tm.Spec.Service, GlobalHost: g.globalHost,
		Result: computed.Result, Drains: computed.Drains, Taints: noExecute(computed.Taints), Tolerations: computed.Tolerations,
	}}
	host, err := hosts.Hostname(httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service, GlobalHost: g.globalHost})
	self := Claim{Kind: KindTrafficMap, Namespace: tm.Namespace, Name: tm.Name, Created: tm.CreationTimestamp.Time,
		Names: []string{GRPCName(tm.Namespace, tm.Spec.Service)}, Journaled: JournaledNames(tm, g.publisher)}
	if err == nil {
		if refused := g.policy.Check(tm.Namespace, host); refused != nil {
			return nil, &userError{ReasonHostnameNotEntitled, notEntitledMessage(tm, g, host, refused)}
		}
		self.Names = append(self.Names, host)
	}
	own := ForeignConflicts(ResolveHostnames(self, g.claims), routeCreated(g.inputs.Route), g.foreign)
	pl.self, pl.claimable = self, own.Claimable
	pl.plan.Conflicts = own.Conflicts
	for _, n := range own.Claimable {
		pl.plan.Conflicts = append(pl.plan.Conflicts, model.Conflict{Hostname: n, Unjournaled: true})
	}
	sortConflicts(pl.plan.Conflicts)
	switch {
	case err != nil:
		pl.plan.HostnameErr = err
	case slices.Contains(own.Owned, NormalizeHostname(host)):
		pl.plan.Hostnames = []string{host}
	}

	// The first malformed input (drains, then taints, then tolerations) names the reason;
	// inputErr carries every one of them.
	var errs []error
	if computed.DrainErr != nil {
		pl.inputReason = ReasonInvalidDrainAnnotation
		errs = append(errs, fmt.Errorf("%s %w; keeping the last valid drains (%s)", source, computed.DrainErr, describeDrains(computed.Drains)))
	}
	if computed.TaintErr != nil {
		if pl.inputReason == "" {
			pl.inputReason = ReasonInvalidTaints
		}
		errs = append(errs, computed.TaintErr)
	}
	if computed.TolerationErr != nil {
		if pl.inputReason == "" {
			pl.inputReason = ReasonInvalidTolerations
		}
		errs = append(errs, fmt.Errorf("%s %w; keeping the last valid tolerations (%s)", source, computed.TolerationErr, describeTolerations(computed.Tolerations)))
	}
	if len(errs) > 0 {
		pl.inputErr = errors.New(joinLines(errors.Join(errs...)))
	}
	return pl, nil
}

// notEntitledMessage says which hostname the map's namespace may not claim, where it comes
// from and the rule.
func notEntitledMessage(tm *v1beta1.TrafficMap, g gathered, host string, refused *Refusal) string {
	from := fmt.Sprintf("inferenceservice %s/%s metadata.annotations[%s] %q", g.isvc.Namespace, g.isvc.Name, v1beta1.AnnotationGlobalHost, host)
	if g.globalHost == "" {
		from = fmt.Sprintf("hostname %q rendered by --host-template for trafficmap %s/%s", host, tm.Namespace, tm.Name)
	}
	return fmt.Sprintf("%s may not be claimed from namespace %s: %s; trafficmap %s/%s claims nothing under it and keeps what it published before",
		from, tm.Namespace, refused.Rule, tm.Namespace, tm.Name)
}

// joinLines flattens a joined error onto one line for a condition message.
func joinLines(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
