package xds

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/trafficmap/publisher/model"
)

// reconnectGrace is the window after a start or a leadership change in which only plans
// published before are confirmed (SinkConfig.ReconnectGrace): clients of the previous
// publisher still reconnecting with backoff ACK changed content before it is confirmed.
// The maps it held Pending are handed to news when it ends. Safe for concurrent use (one
// lock).
type reconnectGrace struct {
	d    time.Duration
	now  func() time.Time
	news *model.News

	mu         sync.Mutex
	start, end time.Time
	held       map[string]bool // maps held Pending by it, reconciled again when it ends
	timer      *time.Timer
}

// begin opens the window from now (nothing without a duration).
func (g *reconnectGrace) begin() {
	if g.d <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if g.timer != nil {
		g.timer.Stop()
	}
	g.start, g.end = now, now.Add(g.d)
	if g.held == nil {
		g.held = map[string]bool{}
	}
	g.timer = time.AfterFunc(g.d, g.ended)
}

// ended hands the maps the window held to news, so their condition follows.
func (g *reconnectGrace) ended() {
	g.mu.Lock()
	held := g.held
	g.held = map[string]bool{}
	g.mu.Unlock()
	g.news.Add(slices.Sorted(maps.Keys(held))...)
}

// stop stops the window's timer.
func (g *reconnectGrace) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
}

// open reports whether the window is open.
func (g *reconnectGrace) open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now().Before(g.end)
}

// waive reports whether the window is open, and if so marks the map held.
func (g *reconnectGrace) waive(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.now().Before(g.end) {
		return false
	}
	g.held[key] = true
	return true
}

// holds reports whether the window holds a map's plan Pending (it was not published
// before and the window is open), and if so marks it held and says why.
func (g *reconnectGrace) holds(key string, publishedBefore bool) (string, bool) {
	if publishedBefore {
		return "", false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.now().Before(g.end) {
		return "", false
	}
	g.held[key] = true
	return fmt.Sprintf("waiting for xds clients to reconnect: serving (or leading) since %s, the xds sink confirms content not published before that only from %s on (--xds-reconnect-grace %s), once every relevant client has ACKed it",
		g.start.UTC().Format(time.RFC3339), g.end.UTC().Format(time.RFC3339), g.d), true
}

// forget drops a deleted map.
func (g *reconnectGrace) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, key)
}
