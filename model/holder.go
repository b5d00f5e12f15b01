package model

import (
	"fmt"

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
// journal names ("" for HoldOwn).
type Holding struct {
	Hold      Hold
	Publisher string
}

// Held reports whether another publisher holds the map (HoldOther).
func (h Holding) Held() bool { return h.Hold == HoldOther }

// Replaces reports whether the publisher writes its journal over another publisher's
// (HoldAdopt, HoldTakeOver).
func (h Holding) Replaces() bool { return h.Hold == HoldAdopt || h.Hold == HoldTakeOver }

// HolderOf is the holder rule: how publisher (its --publisher-name) stands with tm, given
// takeOverFrom (its --take-over-from, "" for none). It is pure and reads only
// status.publisher.
func HolderOf(tm *v1beta1.TrafficMap, publisher, takeOverFrom string) Holding {
	j := tm.Status.Publisher
	if j == nil || j.PublisherName == "" || j.PublisherName == publisher {
		return Holding{Hold: HoldOwn}
	}
	switch {
	case takeOverFrom != "" && j.PublisherName == takeOverFrom:
		return Holding{Hold: HoldTakeOver, Publisher: j.PublisherName}
	case len(j.ClaimedTargets) > 0 || j.LastPositive != nil:
		return Holding{Hold: HoldOther, Publisher: j.PublisherName}
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
	return fmt.Sprintf("trafficmap %s/%s is held by publisher %q (status.publisher names it with claims or a last positive plan); "+
		"publisher %q writes nothing for it: to move the map, run publisher %q with --take-over-from %s",
		tm.Namespace, tm.Name, holder, publisher, publisher, holder)
}

// TornDownByOther reports whether tm is a deleted map another publisher tears down: it is
// being deleted, carries Finalizer, and its claim journal names another publisher. This
// publisher then removes nothing (the route and Services are that publisher's to remove in
// its order) and serves the map's xDS at weight 0, as that publisher does, until the map is
// gone.
func TornDownByOther(tm *v1beta1.TrafficMap, publisher string) bool {
	if tm == nil || tm.DeletionTimestamp == nil || !HasFinalizer(tm) {
		return false
	}
	j := tm.Status.Publisher
	return j != nil && j.PublisherName != "" && j.PublisherName != publisher
}
