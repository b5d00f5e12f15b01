package publish

import (
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
)

// eventSink writes Events through sink and reports a permission error through the
// publisher's logger (client-go's broadcaster reports sink errors only to klog).
type eventSink struct {
	sink record.EventSink
	log  *zap.Logger
}

var _ record.EventSink = eventSink{}

// Create implements record.EventSink.
func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) { return s.check(s.sink.Create(e)) }

// Update implements record.EventSink.
func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.check(s.sink.Update(e)) }

// Patch implements record.EventSink.
func (s eventSink) Patch(old *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.check(s.sink.Patch(old, data))
}

func (s eventSink) check(e *corev1.Event, err error) (*corev1.Event, error) {
	if apierrors.IsForbidden(err) {
		s.log.Error("permission denied: cannot write events; check the publisher's RBAC", zap.String("resource", "events"), zap.Error(err))
	}
	return e, err
}
