package publish

import (
	"context"
	"encoding/json"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
)

// maxMessage bounds condition messages (the API allows 32768 bytes).
const maxMessage = 4096

// publisherStatus is the part of TrafficMap status the publisher owns. status.published and
// the Published condition are always written together.
type publisherStatus struct {
	published  bool
	observed   int64
	gatewayRef *v1beta1.TrafficMapGatewayRef
	condition  metav1.Condition
}

// statusWriter writes one reconcile's status, keeping the object it last wrote so that a
// second write in the same reconcile carries a fresh resourceVersion.
type statusWriter struct {
	p     *Publisher
	tm    *v1beta1.TrafficMap // cached copy or last write result; never modified
	route *gwapiv1.HTTPRoute  // the stored route, once known
	log   *zap.Logger
}

// current reports whether these inputs were already handled: the Published condition is at
// this generation and, when it says True, the stored route holds exactly the desired
// content. Otherwise the publisher first flips Published to False (reason Publishing).
func (s *statusWriter) current(route *gwapiv1.HTTPRoute, desired *httproute.Desired) bool {
	c := meta.FindStatusCondition(s.tm.Status.Conditions, v1beta1.ConditionPublished)
	if c == nil || c.ObservedGeneration != s.tm.Generation {
		return false
	}
	if c.Status != metav1.ConditionTrue {
		return true // already False for this generation; the column is not stale
	}
	return route != nil && httproute.Matches(desired.Route, route)
}

func (s *statusWriter) condition(status metav1.ConditionStatus, reason, message string) metav1.Condition {
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	return metav1.Condition{
		Type: v1beta1.ConditionPublished, Status: status, Reason: reason, Message: message,
		ObservedGeneration: s.tm.Generation,
	}
}

// kept returns the status with the last success's observedTrafficMapGeneration and
// gatewayRef, which a failure leaves as they were.
func (s *statusWriter) kept(c metav1.Condition) publisherStatus {
	ref := s.tm.Status.GatewayRef
	if s.route != nil {
		ref = gatewayRef(s.route)
	}
	return publisherStatus{observed: s.tm.Status.ObservedTrafficMapGeneration, gatewayRef: ref, condition: c}
}

func (s *statusWriter) publishing(message string) publisherStatus {
	return s.kept(s.condition(metav1.ConditionFalse, ReasonPublishing, message))
}

func (s *statusWriter) published(message string) publisherStatus {
	return publisherStatus{
		published:  true,
		observed:   s.tm.Generation,
		gatewayRef: gatewayRef(s.route),
		condition:  s.condition(metav1.ConditionTrue, ReasonPublished, message),
	}
}

// fail records a user error: Published False with reason and message, and an Event. It
// returns nil so the key is not retried hot, unless the status write itself fails.
func (s *statusWriter) fail(ctx context.Context, reason, message string) error {
	return s.write(ctx, s.kept(s.condition(metav1.ConditionFalse, reason, message)))
}

// write applies want with server-side apply under the publisher's field manager, only when
// it differs from what is stored. It carries the resourceVersion it decided on, so a write
// based on a stale read fails with a conflict and is retried.
func (s *statusWriter) write(ctx context.Context, want publisherStatus) error {
	prev := meta.FindStatusCondition(s.tm.Status.Conditions, v1beta1.ConditionPublished)
	if prev != nil && prev.Status == want.condition.Status && prev.Reason == want.condition.Reason &&
		prev.Message == want.condition.Message && prev.ObservedGeneration == want.condition.ObservedGeneration &&
		s.tm.Status.Published == want.published && s.tm.Status.ObservedTrafficMapGeneration == want.observed &&
		equality.Semantic.DeepEqual(s.tm.Status.GatewayRef, want.gatewayRef) {
		return nil
	}
	want.condition.LastTransitionTime = metav1.Now()
	if prev != nil && prev.Status == want.condition.Status {
		want.condition.LastTransitionTime = prev.LastTransitionTime
	}

	body, err := json.Marshal(statusApply{
		APIVersion: v1beta1.SchemeGroupVersion.String(),
		Kind:       "TrafficMap",
		Metadata:   applyMeta{Name: s.tm.Name, Namespace: s.tm.Namespace, ResourceVersion: s.tm.ResourceVersion},
		Status: applyStatus{
			Published:                    want.published,
			ObservedTrafficMapGeneration: want.observed,
			GatewayRef:                   want.gatewayRef,
			Conditions:                   []metav1.Condition{want.condition},
		},
	})
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	force := true
	updated, err := s.p.clients.maps.TrafficMaps(s.tm.Namespace).Patch(ctx, s.tm.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: s.p.cfg.FieldManager, Force: &force}, "status")
	if err != nil {
		return fmt.Errorf("apply trafficmap %s/%s status: %w", s.tm.Namespace, s.tm.Name, err)
	}
	s.log.Info("published condition", zap.String("status", string(want.condition.Status)),
		zap.String("reason", want.condition.Reason), zap.Int64("generation", s.tm.Generation), zap.String("message", want.condition.Message))
	if prev == nil || prev.Reason != want.condition.Reason || prev.Status != want.condition.Status {
		eventType := corev1.EventTypeWarning
		if want.condition.Reason == ReasonPublished || want.condition.Reason == ReasonPublishing {
			eventType = corev1.EventTypeNormal
		}
		s.p.recorder.Event(s.tm, eventType, want.condition.Reason, want.condition.Message)
	}
	s.tm = updated
	return nil
}

func gatewayRef(route *gwapiv1.HTTPRoute) *v1beta1.TrafficMapGatewayRef {
	if route == nil {
		return nil
	}
	return &v1beta1.TrafficMapGatewayRef{Group: gwapiv1.GroupName, Kind: "HTTPRoute", Name: route.Name, Namespace: route.Namespace}
}

// statusApply is the server-side apply body: only publisher-owned status fields.
type statusApply struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   applyMeta   `json:"metadata"`
	Status     applyStatus `json:"status"`
}

type applyMeta struct {
	Name            string `json:"name"`
	Namespace       string `json:"namespace"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

type applyStatus struct {
	Published                    bool                          `json:"published"`
	ObservedTrafficMapGeneration int64                         `json:"observedTrafficMapGeneration,omitempty"`
	GatewayRef                   *v1beta1.TrafficMapGatewayRef `json:"gatewayRef,omitempty"`
	Conditions                   []metav1.Condition            `json:"conditions"`
}
