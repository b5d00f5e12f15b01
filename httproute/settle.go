package httproute

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/model"
)

// ControllerSettles is how long after the sink wrote a route a controller may still serve
// the route's previous generation although its status already accepts the new one. Traefik
// writes route status as soon as its provider reads the route, then applies the new
// configuration at most once per providersThrottleDuration (default 2 s) after the last one:
// seen with Traefik v3.6.12 in make e2e (integration/e2e_traefik_test.go), Published True
// came up to 358 ms before the traffic moved without a settle. A controller not listed
// settles at once.
var ControllerSettles = map[string]time.Duration{
	"traefik.io/gateway-controller": 3 * time.Second,
}

// settleFor is the settle of controller under cfg: the table's when cfg.Settle is 0, none
// when it is negative, cfg.Settle otherwise.
func settleFor(cfg SinkConfig, controller string) time.Duration {
	switch {
	case cfg.Settle == 0:
		return ControllerSettles[controller]
	case cfg.Settle < 0:
		return 0
	}
	return cfg.Settle
}

// settles remembers when the sink wrote each map's route, by generation, so an acceptance
// of that generation counts only once the controller's settle has passed since the write,
// and names the maps whose settle ended (model.Updater), so they are judged again with no
// other event. A route the sink did not write in this process (written before a restart)
// is not held. Safe for concurrent use (one lock).
type settles struct {
	mu      sync.Mutex
	written map[string]writeMark // by map key
	now     func() time.Time
	// News (model.Updater, promoted to the Sink) hands over the maps whose settle ended.
	*model.News
}

// writeMark is one route write: the generation it produced and when.
type writeMark struct {
	generation int64
	at         time.Time
}

func newSettles() *settles {
	return &settles{written: map[string]writeMark{}, now: time.Now, News: model.NewNews()}
}

// wrote records that the sink wrote route (its stored generation) now, unless it already
// wrote that generation.
func (s *settles) wrote(route *gwapiv1.HTTPRoute) {
	if route == nil {
		return
	}
	key := route.Namespace + "/" + route.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if mark, ok := s.written[key]; ok && mark.generation == route.Generation {
		return // a write that changed nothing the gateway reads: the settle runs from the first
	}
	s.written[key] = writeMark{generation: route.Generation, at: s.now()}
}

// forget drops what is remembered of the route namespace/name.
func (s *settles) forget(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, namespace+"/"+name)
}

// remaining is how long the acceptance of route must still wait for a settle of d: the
// rest of d since the sink wrote this generation, 0 when it has passed or the sink did not
// write it.
func (s *settles) remaining(route *gwapiv1.HTTPRoute, d time.Duration) time.Duration {
	if d <= 0 || route == nil {
		return 0
	}
	s.mu.Lock()
	mark, ok := s.written[route.Namespace+"/"+route.Name]
	now := s.now()
	s.mu.Unlock()
	if !ok || mark.generation != route.Generation {
		return 0
	}
	return max(mark.at.Add(d).Sub(now), 0)
}

// after names the map key to the pipeline (Updated) once d has passed.
func (s *settles) after(d time.Duration, key types.NamespacedName) {
	time.AfterFunc(d, func() { s.Add(key.String()) })
}
