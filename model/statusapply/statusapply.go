// Package statusapply builds the server-side apply requests for the publisher-owned part of
// a TrafficMap's status, for the publisher and the operator commands alike. It is apart from
// package model because client-go's apply configurations link client-go's REST client.
package statusapply

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// Configuration is the server-side apply request for the publisher-owned part
// of tm's status: status.published, the Published condition cond, observedTrafficMapGeneration
// and gatewayRef (omitted when zero), the claim journal status.publisher (journal,
// omitted when nil: pass tm.Status.Publisher to keep it) and the PublicationFallback
// condition as tm has it, at tm's resourceVersion so that a request decided from a stale
// read conflicts. Everything that writes these fields under
// the publisher's field manager (the publisher, `publisher drain`) builds its request here,
// so they never disagree on which fields they own (a field left out of a request is
// removed).
func Configuration(tm *v1beta1.TrafficMap, published bool, observed int64, gatewayRef *v1beta1.TrafficMapGatewayRef,
	cond metav1.Condition, journal *v1beta1.TrafficMapPublisherStatus) *omeac.TrafficMapApplyConfiguration {
	return Apply(tm, published, observed, gatewayRef, &cond, journal)
}

// Apply is Configuration with the condition optional: a nil cond leaves
// the Published condition out of the request. The PublicationFallback condition is
// restated as tm has it (ApplyFallback sets another).
func Apply(tm *v1beta1.TrafficMap, published bool, observed int64, gatewayRef *v1beta1.TrafficMapGatewayRef,
	cond *metav1.Condition, journal *v1beta1.TrafficMapPublisherStatus) *omeac.TrafficMapApplyConfiguration {
	fallback := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublicationFallback)
	return ApplyFallback(tm, published, observed, gatewayRef, cond, fallback, journal)
}

// ApplyFallback is Apply with the PublicationFallback condition fallback: nil leaves it
// out of the request, which removes the publisher's (a condition the request leaves out is
// no longer the field manager's).
func ApplyFallback(tm *v1beta1.TrafficMap, published bool, observed int64, gatewayRef *v1beta1.TrafficMapGatewayRef,
	cond, fallback *metav1.Condition, journal *v1beta1.TrafficMapPublisherStatus) *omeac.TrafficMapApplyConfiguration {
	st := omeac.TrafficMapStatus().WithPublished(published)
	for _, c := range []*metav1.Condition{cond, fallback} {
		if c != nil {
			st.WithConditions(metav1ac.Condition().
				WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).WithMessage(c.Message).
				WithObservedGeneration(c.ObservedGeneration).WithLastTransitionTime(c.LastTransitionTime))
		}
	}
	if observed != 0 {
		st.WithObservedTrafficMapGeneration(observed)
	}
	if r := gatewayRef; r != nil {
		ref := omeac.TrafficMapGatewayRef().WithKind(r.Kind).WithName(r.Name)
		if r.Group != "" {
			ref.WithGroup(r.Group)
		}
		if r.Namespace != "" {
			ref.WithNamespace(r.Namespace)
		}
		st.WithGatewayRef(ref)
	}
	if j := journal; j != nil {
		pj := omeac.TrafficMapPublisherStatus().WithPublisherName(j.PublisherName)
		if len(j.ClaimedTargets) > 0 {
			pj.WithClaimedTargets(j.ClaimedTargets...)
		}
		if j.ObservedOptionsDigest != "" {
			pj.WithObservedOptionsDigest(j.ObservedOptionsDigest)
		}
		if lp := j.LastPositive; lp != nil {
			alp := omeac.TrafficMapPublisherLastPositive().WithTrafficMapGeneration(lp.TrafficMapGeneration).
				WithObservedISVCGeneration(lp.ObservedISVCGeneration).WithPlanCompatibilityDigest(lp.PlanCompatibilityDigest)
			for _, t := range lp.Targets {
				alp.WithTargets(omeac.TrafficMapPublisherTarget().WithTarget(t.Target).WithWeight(t.Weight))
			}
			pj.WithLastPositive(alp)
		}
		st.WithPublisher(pj)
	}
	ac := omeac.TrafficMap(tm.Name, tm.Namespace).WithStatus(st)
	if tm.ResourceVersion != "" {
		ac.WithResourceVersion(tm.ResourceVersion)
	}
	return ac
}
