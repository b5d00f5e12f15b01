package main

import (
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// renderConditions renders docs/reference/conditions.md from package model: the condition
// types of a TrafficMap, the reasons of Published, of PublicationFallback and of the Events.
func renderConditions(string) ([]byte, error) {
	d := newDoc("Conditions and reasons", "The conditions of a TrafficMap and every reason the publisher writes, "+
		"from the typed reasons of package model (model/reason.go, model/fallback.go, model/reasondoc.go).")
	d.WriteString("\n## Conditions\n")
	var rows [][]string
	for _, c := range model.Conditions() {
		rows = append(rows, []string{code(c.Type), c.Owner, c.Meaning})
	}
	d.table([]string{"Type", "Written by", "Meaning"}, rows)

	d.WriteString("\n## Reasons of " + code(v1beta1.ConditionPublished) + "\n")
	d.para("Published is True with reason Published only; every other reason comes with False. When the",
		"condition's status or reason changes, the publisher records an Event with the same reason and message:",
		"Normal for news of progress, Warning for the others (column Event).")
	rows = nil
	for _, r := range model.Reasons() {
		event := "Warning"
		if r.Normal() {
			event = "Normal"
		}
		rows = append(rows, []string{code(string(r)), event, r.Description()})
	}
	d.table([]string{"Reason", "Event", "Meaning"}, rows)

	d.WriteString("\n## Reasons of " + code(v1beta1.ConditionPublicationFallback) + "\n")
	d.para("When the condition is Unknown its reason is the Published condition's reason of the failure.")
	rows = nil
	for _, r := range model.FallbackReasons() {
		rows = append(rows, []string{code(string(r)), r.Description()})
	}
	d.table([]string{"Reason", "Meaning"}, rows)

	d.WriteString("\n## Reasons of Events only\n")
	rows = nil
	for _, r := range model.EventReasons() {
		rows = append(rows, []string{code(string(r)), r.Description()})
	}
	d.table([]string{"Reason", "Meaning"}, rows)
	return d.Bytes(), nil
}
