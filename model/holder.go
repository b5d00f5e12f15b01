package model

import (
	"fmt"
	"slices"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// OMEPublisherName is the publisherName OME's built-in Gateway API publisher writes into a
// map's claim journal (its `gatewayapi` publisher).
const OMEPublisherName = "gatewayapi"

// Hold is how a publisher stands with a map, read from the map's claim journal
// (status.publisher) alone.
type Hold int

const (
	// HoldOwn: the journal is the publisher's own, or there is none: it publishes the map.
	HoldOwn Hold = iota
	// HoldAdopt: the journal names another publisher but holds neither claims nor a last
	// positive plan (OME's rule): the publisher adopts it, replacing it with its own.
	HoldAdopt
	// HoldTakeOver: the journal names the publisher given to --take-over-from: the map is
	// handed over (the publisher's journal replaces it, the other's last positive plan is
	// dropped), then published as its own.
	HoldTakeOver
	// HoldOther: another publisher holds the map (its journal has claims or a last positive
	// plan): the publisher writes nothing external for it.
	HoldOther
)

// Holding is a publisher's standing with one map: Hold, and Publisher, the publisherName the
// journal names ("" for HoldOwn). Unknown is set when that name is not a known publisher
// (Publishers.Known): the journal is a forgery or a misconfiguration, and counts for no
// one (UnknownEvidence).
type Holding struct {
	Hold      Hold
	Publisher string
	Unknown   bool
}

// Publishers are the publisher names a publisher knows: its own (Self, its
// --publisher-name), TakeOverFrom (--take-over-from, "" for none) and Known
// (--known-publishers); OME's "gatewayapi" is always known.
type Publishers struct {
	Self, TakeOverFrom string
	Known              []string
}

// IsKnown reports whether name is a known publisher's.
func (p Publishers) IsKnown(name string) bool {
	return name == p.Self || name == OMEPublisherName || p.TakeOverFrom != "" && name == p.TakeOverFrom || slices.Contains(p.Known, name)
}

// Held reports whether another publisher holds the map (HoldOther).
func (h Holding) Held() bool { return h.Hold == HoldOther }

// Replaces reports whether the publisher writes its journal over another publisher's
// (HoldAdopt, HoldTakeOver).
func (h Holding) Replaces() bool { return h.Hold == HoldAdopt || h.Hold == HoldTakeOver }

// HolderOf is the holder rule: how p.Self stands with tm. It is pure and reads only
// status.publisher. A journal naming a publisher that is not known (a tenant's forgery)
// with claims or a last positive plan makes the map held (Unknown): this publisher writes
// nothing external for it and its journal counts for no one.
func HolderOf(tm *v1beta1.TrafficMap, p Publishers) Holding {
	j := tm.Status.Publisher
	if j == nil || j.PublisherName == "" || j.PublisherName == p.Self {
		return Holding{Hold: HoldOwn}
	}
	switch {
	case p.TakeOverFrom != "" && j.PublisherName == p.TakeOverFrom:
		return Holding{Hold: HoldTakeOver, Publisher: j.PublisherName}
	case len(j.ClaimedTargets) > 0 || j.LastPositive != nil:
		return Holding{Hold: HoldOther, Publisher: j.PublisherName, Unknown: !p.IsKnown(j.PublisherName)}
	}
	return Holding{Hold: HoldAdopt, Publisher: j.PublisherName}
}

// HolderSilent reports whether the holder of tm has said nothing about its current
// generation: tm has no Published condition, or its condition is about an older generation.
// Only then does a publisher that does not hold the map write its condition (else two
// publishers would flip it forever).
func HolderSilent(tm *v1beta1.TrafficMap) bool {
	c := FindPublished(tm)
	return c == nil || c.ObservedGeneration < tm.Generation
}

// HeldStatus is the status a publisher that does not hold tm writes while its holder is
// silent (HolderSilent): Published False, reason PublisherChanged, naming the holder and how
// to take the map over. Held is set, so the write carries only the condition and
// status.published (nothing of the holder's: journal, gatewayRef, generation).
func HeldStatus(tm *v1beta1.TrafficMap, holder, publisher string) Status {
	st := NotPublished(tm, ReasonPublisherChanged, HeldMessage(tm, holder, publisher), nil)
	st.Held = true
	return st
}

// HeldMessage says who holds tm and how publisher would take it over.
func HeldMessage(tm *v1beta1.TrafficMap, holder, publisher string) string {
	return heldMessage(tm, holder, publisher)
}

// UnknownHolderMessage says that tm's journal names a publisher that is not known, so it
// counts for no one.
func UnknownHolderMessage(tm *v1beta1.TrafficMap, holder, publisher string) string {
	return fmt.Sprintf("trafficmap %s/%s status.publisher.publisherName %q is not a known publisher (this publisher's --publisher-name %q, --take-over-from, --known-publishers or %q): "+
		"its claim journal grants no name to anyone and publisher %q writes nothing for the map; to move the map, run publisher %q with --take-over-from %s",
		tm.Namespace, tm.Name, short(holder), publisher, OMEPublisherName, publisher, publisher, short(holder))
}

func heldMessage(tm *v1beta1.TrafficMap, holder, publisher string) string {
	return fmt.Sprintf("trafficmap %s/%s is held by publisher %q (status.publisher names it with claims or a last positive plan); "+
		"publisher %q writes nothing for it: to move the map, run publisher %q with --take-over-from %s",
		tm.Namespace, tm.Name, holder, publisher, publisher, holder)
}

// TornDownByOther reports whether tm is a deleted map another publisher tears down: it is
// being deleted, carries Finalizer, and another publisher holds it by the holder rule
// (HolderOf(tm, p).Held(): its journal has claims or a last positive plan and names neither
// p.Self nor p.TakeOverFrom). This publisher then removes nothing (the route and Services are
// that publisher's to remove in its order) and serves the map's xDS at weight 0, as that
// publisher does, until the map is gone. A journal naming an unknown publisher with claims
// is held too (HolderOf, Unknown), as for a live map: this publisher writes nothing for it.
// Finalizing and TornDownByOther never both hold.
func TornDownByOther(tm *v1beta1.TrafficMap, p Publishers) bool {
	if tm == nil || tm.DeletionTimestamp == nil || !HasFinalizer(tm) {
		return false
	}
	return HolderOf(tm, p).Held()
}
