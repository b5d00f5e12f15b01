package publish

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// Maps another publisher holds (model.HolderOf, HoldOther): the claim journal names it, with
// claims or a last positive plan. The leader's pipeline writes nothing external for such a
// map (no journal, route, Service or claim). For the sinks that serve on every replica (xDS)
// it does what a replica that does not lead does (serve): it plans the map as the holder's
// journal has it and serves those same weights. It does not withdraw: when the map was
// handed over from this publisher (--take-over-from on the other), its xDS clients keep the
// weights they had, the same the new holder computes, so there is no gap; and this publisher
// never says Published True for the map, so no True is about traffic it does not route. It
// writes the Published condition (False, PublisherChanged) only while the holder is silent
// (model.HolderSilent); where the holder wrote a condition at the map's generation it is
// left alone (else two publishers would flip it forever), and only a Warning Event and a
// metric mark the holder change, once per change.

// holderLog remembers, per map, the holder this publisher last reported (Event, metric), so
// a holder change is reported once. It is safe for concurrent use.
type holderLog struct {
	mu      sync.Mutex
	holders map[types.NamespacedName]string
}

func newHolderLog() *holderLog {
	return &holderLog{holders: map[types.NamespacedName]string{}}
}

// changed records holder as key's holder and reports whether it was not already ("" clears).
func (l *holderLog) changed(key types.NamespacedName, holder string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holders[key] == holder {
		return false
	}
	if holder == "" {
		delete(l.holders, key)
	} else {
		l.holders[key] = holder
	}
	return true
}

// held handles tm, which another publisher holds (h): serve its plan to the serving sinks as
// a replica that does not lead would, report the holder change once, and write the Published
// condition only while the holder is silent. A holder that is not a known publisher
// (h.Unknown: a forged or mistaken publisherName) is reported as such, its journal counts
// for no one (serveMap serves none of its names), and the metric counts it as "unknown" (a
// name a tenant chose is no metric label).
func (r *reconciler) held(ctx context.Context, key cache.ObjectName, tm *v1beta1.TrafficMap, h model.Holding, log *zap.Logger) (time.Duration, error) {
	if err := r.serveMap(tm, servingOf(r.sinks)); err != nil {
		return 0, err
	}
	holder, label, message := h.Publisher, h.Publisher, model.HeldMessage(tm, h.Publisher, r.publisher)
	if h.Unknown {
		label, message = "unknown", model.UnknownHolderMessage(tm, h.Publisher, r.publisher)
		keeper(r).reportIgnored(tm, model.UnknownEvidence(tm).Ignored, log)
	}
	changed := r.holders.changed(types.NamespacedName(key), holder)
	if changed {
		log.Info("trafficmap is held by another publisher; writing nothing for it", zap.String("holder", holder), zap.Bool("known", !h.Unknown))
		r.metrics.heldBy(label)
	}
	if model.HolderSilent(tm) {
		// The status writer records the Warning Event when the reason changes.
		st := model.HeldStatus(tm, holder, r.publisher)
		st.Condition.Message = message
		_, hold, err := r.status.write(ctx, tm, st, log)
		return hold, err
	}
	if changed && r.status.recorder != nil {
		r.status.recorder.Event(tm, corev1.EventTypeWarning, string(model.ReasonPublisherChanged), message)
	}
	return 0, nil
}
