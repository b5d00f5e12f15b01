package publish

import (
	"context"
	"encoding/json"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
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

// announce writes Published False (Publishing) with message before new inputs are
// published, so PUBLISHED is never stale. A map with no Published condition yet has an
// empty column, which is not stale either: it only starts the latency clock, and a cold
// start of N new maps saves N status writes.
func (s *statusWriter) announce(ctx context.Context, message string) error {
	if meta.FindStatusCondition(s.tm.Status.Conditions, v1beta1.ConditionPublished) == nil {
		s.p.metrics.started(cache.NewObjectName(s.tm.Namespace, s.tm.Name))
		return nil
	}
	return s.write(ctx, s.publishing(message))
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
// based on a stale read conflicts; it then re-reads the live map and retries while the
// generation is the one the decision was made for (otherwise the newer generation is
// reconciled next).
func (s *statusWriter) write(ctx context.Context, want publisherStatus) error {
	generation := s.tm.Generation
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := s.apply(ctx, want)
		if !apierrors.IsConflict(err) {
			return err
		}
		live, getErr := s.p.clients.maps.TrafficMaps(s.tm.Namespace).Get(ctx, s.tm.Name, metav1.GetOptions{})
		if getErr != nil {
			return fmt.Errorf("re-read trafficmap after conflict: %w", getErr)
		}
		if live.UID != s.tm.UID || live.Generation != generation {
			return err // the map changed under us: reconcile it afresh
		}
		s.tm = live
		return err
	})
}

func (s *statusWriter) apply(ctx context.Context, want publisherStatus) error {
	prev := meta.FindStatusCondition(s.tm.Status.Conditions, v1beta1.ConditionPublished)
	if prev != nil && prev.Status == want.condition.Status && prev.Reason == want.condition.Reason &&
		prev.Message == want.condition.Message && prev.ObservedGeneration == want.condition.ObservedGeneration &&
		s.tm.Status.Published == want.published && s.tm.Status.ObservedTrafficMapGeneration == want.observed &&
		equality.Semantic.DeepEqual(s.tm.Status.GatewayRef, want.gatewayRef) {
		return nil
	}
	cond := want.condition
	cond.LastTransitionTime = metav1.Now()
	if prev != nil && prev.Status == cond.Status {
		cond.LastTransitionTime = prev.LastTransitionTime
	}

	body, err := json.Marshal(statusApply{
		APIVersion: v1beta1.SchemeGroupVersion.String(),
		Kind:       "TrafficMap",
		Metadata:   applyMeta{Name: s.tm.Name, Namespace: s.tm.Namespace, ResourceVersion: s.tm.ResourceVersion},
		Status: applyStatus{
			Published:                    want.published,
			ObservedTrafficMapGeneration: want.observed,
			GatewayRef:                   want.gatewayRef,
			Conditions:                   []metav1.Condition{cond},
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
	s.p.metrics.condition(cache.NewObjectName(s.tm.Namespace, s.tm.Name), string(cond.Status), cond.Reason)
	s.log.Info("published condition", zap.String("status", string(cond.Status)),
		zap.String("reason", cond.Reason), zap.Int64("generation", s.tm.Generation), zap.String("message", cond.Message))
	if prev == nil || prev.Reason != cond.Reason || prev.Status != cond.Status {
		eventType := corev1.EventTypeWarning
		if cond.Reason == ReasonPublished || cond.Reason == ReasonPublishing {
			eventType = corev1.EventTypeNormal
		}
		s.p.recorder.Event(s.tm, eventType, cond.Reason, cond.Message)
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
