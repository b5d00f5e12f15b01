package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/weights"
)

// The plan step of the pipeline. PlanMap is pure: from the gathered inputs (Gathered, a
// plain struct the controller fills from its caches) it computes the effective weights
// (Compute) and the sink-neutral plan every sink translates, and classifies malformed
// input.

// UserError is a user error: Published False with Reason and Message and a Warning Event,
// no retry (the next change to the inputs reconciles again). Nothing is published.
type UserError struct {
	Reason  Reason
	Message string
}

// Error is "Reason: Message".
func (e *UserError) Error() string { return string(e.Reason) + ": " + e.Message }

// Gathered is everything one map's plan is made from. The controller fills it from its
// informer caches; nothing in it refers to a cache.
type Gathered struct {
	// Source is the InferenceService spec.service names (metadata only).
	Source *metav1.PartialObjectMetadata
	// GlobalHost is Source's v1beta1.AnnotationGlobalHost annotation, trimmed; "" when
	// absent.
	GlobalHost string
	// Inputs are the effective weights' inputs.
	Inputs Inputs
	// Hostname is the map's hostname (the GlobalHost annotation, else the rendered
	// --host-template); HostnameErr says why none could be derived.
	Hostname    string
	HostnameErr error
	// RouteCreated is the creationTimestamp of the map's own HTTPRoute, nil when it has
	// none (ForeignConflicts).
	RouteCreated *time.Time
	// Claims are the other maps' claims that decide which of the map's names it owns;
	// Foreign are the claims of foreign routes on the same Gateway listener that overlap
	// its names.
	Claims, Foreign []Claim
	// Evidence is what the map's own claim journal counts for (ReadJournal: the names the
	// publisher's record grants it, under the policy); Policy decides which hostname the
	// map's namespace may claim.
	Evidence Evidence
	Policy   ClaimPolicy
}

// Planned is the outcome of the plan step for one map.
type Planned struct {
	Plan     Plan
	Computed Computed
	// InputReason and InputErr describe malformed inputs that fell back to the last valid
	// state recorded: the plan is published, but Published says False with InputReason so
	// the operator learns the input was not taken.
	InputReason Reason
	InputErr    error
	// Self is the map's claim; Claimable are its names no one holds that its journal does
	// not hold yet (Ownership.Claimable): the pipeline journals them before any sink
	// serves them.
	Self      Claim
	Claimable []string
}

// PlanMap makes the plan for the gathered map. A *UserError means nothing can be
// published.
func PlanMap(g Gathered) (*Planned, error) {
	tm := g.Inputs.TrafficMap
	computed, err := Compute(g.Inputs)
	source := fmt.Sprintf("inferenceservice %s/%s", g.Source.Namespace, g.Source.Name)
	if err != nil {
		return nil, computeError(tm, source, err)
	}
	pl := &Planned{Computed: computed, Plan: Plan{
		Namespace: tm.Namespace, Name: tm.Name, UID: string(tm.UID), Generation: tm.Generation,
		Service: tm.Spec.Service, GlobalHost: g.GlobalHost,
		Result: computed.Result, Drains: computed.Drains, Taints: NoExecute(computed.Taints), Tolerations: computed.Tolerations,
	}}
	host, err := g.Hostname, g.HostnameErr
	self := Claim{Kind: KindTrafficMap, Namespace: tm.Namespace, Name: tm.Name, Created: tm.CreationTimestamp.Time,
		Names: []string{GRPCName(tm.Namespace, tm.Spec.Service)}, Journaled: g.Evidence.Journaled, Granted: g.Evidence.Granted}
	if err == nil {
		if refused := g.Policy.Check(tm.Namespace, host); refused != nil {
			return nil, &UserError{ReasonHostnameNotEntitled, notEntitledMessage(tm, g, host, refused)}
		}
		self.Names = append(self.Names, host)
	}
	own := ForeignConflicts(ResolveHostnames(self, g.Claims), g.RouteCreated, g.Foreign)
	pl.Self, pl.Claimable = self, own.Claimable
	pl.Plan.Conflicts = own.Conflicts
	for _, n := range own.Claimable {
		pl.Plan.Conflicts = append(pl.Plan.Conflicts, Conflict{Hostname: n, Unjournaled: true})
	}
	sortConflicts(pl.Plan.Conflicts)
	switch {
	case err != nil:
		pl.Plan.HostnameErr = err
	case slices.Contains(own.Owned, NormalizeHostname(host)):
		pl.Plan.Hostnames = []string{host}
	}
	pl.InputReason, pl.InputErr = inputFallbacks(source, computed)
	return pl, nil
}

// computeError classifies an error of Compute as the user error it is.
func computeError(tm *v1beta1.TrafficMap, source string, err error) *UserError {
	switch {
	case errors.Is(err, ErrNoDrainFallback):
		return &UserError{ReasonInvalidDrainAnnotation, source + " " + err.Error()}
	case errors.Is(err, ErrNoTolerationFallback):
		return &UserError{ReasonInvalidTolerations, source + " " + err.Error()}
	case errors.Is(err, ErrNoTaintFallback):
		return &UserError{ReasonInvalidTaints, joinLines(err)}
	case errors.Is(err, weights.ErrInvalidRamp):
		return &UserError{ReasonInvalidRamp, source + " " + err.Error() + "; the published weights are left as they were"}
	}
	return &UserError{ReasonInvalidTrafficMap, fmt.Sprintf("trafficmap %s/%s is invalid; the published route is left as it was: %s",
		tm.Namespace, tm.Name, joinLines(err))}
}

// inputFallbacks names the malformed inputs computed fell back on: the first (drains, then
// taints, then tolerations) names the reason; the error carries every one of them.
func inputFallbacks(source string, computed Computed) (Reason, error) {
	var reason Reason
	var errs []error
	if computed.DrainErr != nil {
		reason = ReasonInvalidDrainAnnotation
		errs = append(errs, fmt.Errorf("%s %w; keeping the last valid drains (%s)", source, computed.DrainErr, describeDrains(computed.Drains)))
	}
	if computed.TaintErr != nil {
		if reason == "" {
			reason = ReasonInvalidTaints
		}
		errs = append(errs, computed.TaintErr)
	}
	if computed.TolerationErr != nil {
		if reason == "" {
			reason = ReasonInvalidTolerations
		}
		errs = append(errs, fmt.Errorf("%s %w; keeping the last valid tolerations (%s)", source, computed.TolerationErr, describeTolerations(computed.Tolerations)))
	}
	if len(errs) > 0 {
		return reason, errors.New(joinLines(errors.Join(errs...)))
	}
	return reason, nil
}

// notEntitledMessage says which hostname the map's namespace may not claim, where it comes
// from and the rule.
func notEntitledMessage(tm *v1beta1.TrafficMap, g Gathered, host string, refused *Refusal) string {
	from := fmt.Sprintf("inferenceservice %s/%s metadata.annotations[%s] %q", g.Source.Namespace, g.Source.Name, v1beta1.AnnotationGlobalHost, host)
	if g.GlobalHost == "" {
		from = fmt.Sprintf("hostname %q rendered by --host-template for trafficmap %s/%s", host, tm.Namespace, tm.Name)
	}
	return fmt.Sprintf("%s may not be claimed from namespace %s: %s; trafficmap %s/%s claims nothing under it and keeps what it published before",
		from, tm.Namespace, refused.Rule, tm.Namespace, tm.Name)
}

// joinLines flattens a joined error onto one line for a condition message.
func joinLines(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
