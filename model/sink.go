package model

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/weights"
)

// Plan is what one TrafficMap must publish, computed by a pure function from the caches'
// objects. Sinks must not modify it.
type Plan struct {
	// Namespace and Name are the TrafficMap's.
	Namespace, Name string
	// UID and Generation are the TrafficMap's metadata.uid and metadata.generation.
	UID        string
	Generation int64
	// Service is the map's spec.service (the InferenceService).
	Service string
	// GlobalHost is the InferenceService's ome.io/global-host annotation, "" when absent.
	GlobalHost string
	// Hostnames are the names clients reach the service by that the map owns, sorted; empty
	// when none can be derived (HostnameErr says why) or another claim holds it (Conflicts).
	Hostnames []string
	// Conflicts are the map's names another claim holds (its hostname, or
	// "<service>.<namespace>", the name gRPC clients dial), sorted by name. No sink serves
	// them for this map, and Published is False (HostnameConflict) while there is one.
	Conflicts []Conflict
	// HostnameErr is why no hostname could be derived, nil otherwise.
	HostnameErr error
	// Result holds the effective weights, one entry per spec.entries item.
	Result weights.Result
	// Drains is the drain set Result was computed with (the annotation's or, when it is
	// malformed, the last valid set recorded by the HTTPRoute sink).
	Drains []weights.Drain
	// Taints are the NoExecute taints Result was computed with, per entry cluster; the
	// HTTPRoute sink records them so a malformed source later falls back to them.
	Taints map[string][]weights.Taint
	// Tolerations are the service's tolerations Result was computed with.
	Tolerations []weights.Toleration
}

// Standing is where a map's Published condition stands as the pipeline hands a plan to the
// sinks, read from the map's status and the Durable sinks before Apply. It is not part of
// the plan (a plan is what was planned, the same for every replica and every sink); a sink
// that serves before it is judged (the xDS sink) reads it only to judge.
type Standing struct {
	// PublishedBefore reports that the map's PUBLISHED column claims nothing this plan
	// could contradict: either the map has no Published condition yet (a new map: no
	// client was told anything about it, and no operator waits on it), or its condition is
	// True at Generation and every enabled Durable sink already carries the plan (the same
	// content was confirmed before). With a condition but no enabled Durable sink it is
	// false, as nothing then records what was published before a restart. The xDS sink
	// uses it to keep unchanged maps confirmed while clients reconnect after a start.
	PublishedBefore bool
	// Confirmed is the second half of PublishedBefore alone: the map's condition is True at
	// Generation and every enabled Durable sink (or the publisher's record) carries the
	// plan, so this very content was confirmed before. A new map is not Confirmed.
	Confirmed bool
	// Published: the map's Published condition is True at Generation as the pipeline
	// applies the plan (after it announced a change, which sets it False).
	Published bool
	// Finalizing: the map is being deleted and the plan is its teardown's zero plan
	// (Zeroed; the condition says ReasonFinalizing). The sink sets to 0 only what it still
	// publishes for the map and creates nothing (see Retiring); a policy that keeps the
	// last positive weights does not apply.
	Finalizing bool
}

// Conflict is one of a map's names that another claim holds, or that the map claims but
// has not journaled yet (no sink serves a name before it is in the map's claim journal).
type Conflict struct {
	// Hostname is the map's name.
	Hostname string
	// Owner is who holds it; zero when Unjournaled.
	Owner Owner
	// Unjournaled: no one holds the name, but the map's claim on it is not in its journal
	// yet (the pipeline journals it before it applies a plan).
	Unjournaled bool
}

// Owner is the holder of a contested name.
type Owner struct {
	// Kind is "TrafficMap", or "HTTPRoute" for a route the publisher does not manage.
	Kind string
	// Namespace and Name identify it.
	Namespace, Name string
	// Hostname is the owner's name that overlaps (equal, or a wildcard covering it).
	Hostname string
	// Created is the owner's metadata.creationTimestamp.
	Created time.Time
}

// Withheld reports whether name is one of the plan's contested names.
func (p *Plan) Withheld(name string) bool {
	for _, c := range p.Conflicts {
		if c.Hostname == name {
			return true
		}
	}
	return false
}

// Key is the map's key.
func (p *Plan) Key() types.NamespacedName { return Key(p.Namespace, p.Name) }

// State is where a sink stands with a plan.
type State int

const (
	// InPlace: the plan's content is live in the sink and confirmed by its consumers (the
	// gateway accepted the route; every relevant xDS client ACKed).
	InPlace State = iota + 1
	// Pending: the sink is working on it or waits for its consumers (Progress counts them).
	Pending
	// Refused: the sink cannot carry the plan (a user error: a name taken by a foreign
	// object, content it cannot represent). What it published before stays.
	Refused
	// Rejected: a consumer rejected the content (the gateway did not accept the route; an
	// xDS client NACKed it).
	Rejected
)

// String names the state for logs and reports.
func (s State) String() string {
	switch s {
	case InPlace:
		return "InPlace"
	case Pending:
		return "Pending"
	case Refused:
		return "Refused"
	case Rejected:
		return "Rejected"
	}
	return "Unknown"
}

// Progress counts the consumers that confirmed a plan.
type Progress struct {
	// Confirmed of Total relevant consumers have confirmed the content; Required is the
	// number that must be connected at all (0: none required).
	Confirmed, Total, Required int
}

// Confirmation is one sink's typed answer for one plan.
type Confirmation struct {
	// Sink is the sink's name.
	Sink string
	// State is where the sink stands.
	State State
	// Reason is the Published condition reason for a Refused or Rejected state (and may
	// refine Pending); empty for InPlace.
	Reason Reason
	// Message explains the state for people, naming the objects involved. Nothing parses it.
	Message string
	// Progress counts confirming consumers, nil when the sink has no such count.
	Progress *Progress
	// GatewayRef is the object the sink realized the map as, nil when none.
	GatewayRef *v1beta1.TrafficMapGatewayRef
	// Writes counts the API writes this Apply made.
	Writes int
}

// Sink is one place the publisher publishes to. Implementations are safe for concurrent
// use by the pipeline's workers, for different maps at once.
type Sink interface {
	// Name is the sink's name, as in --sinks ("httproute", "xds").
	Name() string
	// Check reports, without changing or reading anything published, whether the sink can
	// carry plan's content at all: nil when it can, else a Refused confirmation whose
	// Reason and Message (naming the sink) say why, e.g. content it cannot represent. The
	// pipeline checks a plan with every enabled sink before any sink applies it, and a plan
	// one sink refuses is applied by none (each keeps what it published before). It
	// depends on plan alone and is safe for concurrent use.
	Check(plan *Plan) *Confirmation
	// Carries reports whether consumers already see exactly plan's content, so that Apply
	// would change nothing they see. Before applying a plan some sink does not carry, the
	// pipeline sets Published False (Publishing), so the column is never stale.
	Carries(plan *Plan) bool
	// Apply makes the sink carry plan and reports the confirmation, judged with the map's
	// standing. An error is transient (the pipeline retries with backoff); user errors are
	// a Refused confirmation. A failed Apply leaves what was published before in place.
	Apply(ctx context.Context, plan *Plan, standing Standing) (Confirmation, error)
	// Delete removes everything the sink published or remembers for the deleted map.
	Delete(ctx context.Context, namespace, name string) (removed int, err error)
}

// Retiring is a sink that takes part in the ordered teardown of a map the publisher's
// Finalizer holds. The pipeline first hands every sink the map's zero plan (Zeroed) with
// Standing.Finalizing, to which a sink answers by setting to 0 only what it still
// publishes for the map: it creates nothing for a map being deleted, and one that holds
// nothing answers InPlace (so a restart after the removal does not publish the map
// again). Once every sink confirmed the zeros (or the teardown timeout passed) it calls
// Retire, and it lets the map go once every Retire is InPlace (or the timeout passed). A
// sink that is not Retiring is Deleted instead. Delete, once the map is gone, forgets what
// Retire remembers.
type Retiring interface {
	// Retire removes what the sink published for the map and reports whether the
	// consumers that held it confirmed the removal: InPlace once every one did (or none
	// held it), Pending with Progress while some did not. Called again it removes nothing
	// more and reports again; the sink names the map through Updater when its consumers
	// confirm. An error is transient.
	Retire(ctx context.Context, key types.NamespacedName) (Confirmation, error)
}

// Starter is a sink with work of its own (a server, a rebuild loop). Start runs after the
// informer caches have synced; it returns once the sink can confirm plans, and its work
// runs until ctx is done. wait blocks until that work has stopped.
type Starter interface {
	Start(ctx context.Context) (wait func(), err error)
}

// Serving is a sink that every replica serves from, leading or not (the xDS sink): the
// pipeline hands it every map's current plan on every replica (Serve), before the sink
// starts (so its first answer is complete) and with every change, and withdraws a deleted
// map (Withdraw). Serve records and returns; the sink's own work carries the plan out. A
// plan that cannot be made, or that an enabled sink refuses, is not handed: the sink keeps
// the last plan it was given. Apply hands the plan too.
type Serving interface {
	Serve(plan *Plan)
	Withdraw(key types.NamespacedName)
}

// Updater is a sink whose consumers say things about maps after Apply returned (an xDS
// client ACKed, NACKed, connected or left; served content changed; a grace window
// ended). Updates signals that Updated has keys; Updated returns and clears them. The
// pipeline, which alone owns the work queue, reconciles those maps again. Nothing is
// planned by the sink: it only names maps.
type Updater interface {
	Updates() <-chan struct{}
	Updated() []types.NamespacedName
}

// Durable is a sink whose published state outlives the publisher (an object in the API
// server, such as the HTTPRoute): right after a start its Carries tells whether a plan is
// what was published before the start. Durable itself does nothing.
type Durable interface {
	Durable()
}

// Leading is a sink told that this replica has just become the leader, so its pipeline
// starts deciding Published conditions (called before the first reconcile as leader), and,
// while it leads, that another replica stopped counting (its report expired): in both cases
// clients that were connected elsewhere may now be reconnecting here.
type Leading interface {
	Leading()
}

// Debugger is a sink that serves debug endpoints, by path, on the publisher's HTTP server.
type Debugger interface {
	DebugHandlers() map[string]http.Handler
}

// Digest is a short, deterministic digest of everything a sink publishes for the plan
// (ContentDigest of its service, the names it serves and withholds, and its effective
// weights). Two plans that publish the same thing have the same digest, whatever the inputs
// they were computed from. The publisher records it (with the HTTPRoute sink off) to prove
// after a restart that a map's Published condition was about this content.
func (p *Plan) Digest() string {
	withheld := make([]string, 0, len(p.Conflicts))
	for _, c := range p.Conflicts {
		withheld = append(withheld, c.Hostname)
	}
	return ContentDigest(p.Service, p.Hostnames, withheld, p.Result.Entries)
}
