package xds

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
)

// Retire implements model.Retiring: the map's resources leave the next snapshot, as for
// Delete, but the sink remembers what each flavour served of them, and confirms the
// removal once every client that held them (ConfirmRemoval: still subscribed to one of
// them, and allowed to see the map) ACKed a version served after it. Called again it
// withdraws nothing more and judges again; the clients' ACKs name the map to the pipeline
// (Updated) until Delete forgets it. Only this replica's clients count: the other
// replicas serve the map's zero plan until it is gone.
func (s *Sink) Retire(_ context.Context, key types.NamespacedName) (model.Confirmation, error) {
	k := key.String()
	s.mu.Lock()
	held, known := s.retired[k]
	if !known {
		held = map[Flavour]Served{}
		if svc, ok := s.served[k]; ok {
			held = ServedBy(s.envoy, svc)
		}
		s.retired[k] = held
		delete(s.pending, k)
		delete(s.checked, k)
	}
	s.mu.Unlock()
	if !known {
		s.Withdraw(key)
		s.grace.forget(k)
	}
	acked, total := ConfirmRemoval(s.server.Tracker().Clients(), s.history, k, held)
	c := model.Confirmation{Sink: SinkName, State: model.InPlace, Progress: &model.Progress{Confirmed: acked, Total: total}}
	switch {
	case total == 0:
		c.Message = fmt.Sprintf("xds resources of trafficmap %s withdrawn; no connected client holds them", k)
	case acked == total:
		c.Message = fmt.Sprintf("xds resources of trafficmap %s withdrawn; %d/%d clients that held them ACKed a version without them", k, acked, total)
	default:
		c.State = model.Pending
		c.Message = fmt.Sprintf(waitingPrefix+"%d/%d that held trafficmap %s's resources ACKed a version without them", acked, total, k)
	}
	return c, nil
}
