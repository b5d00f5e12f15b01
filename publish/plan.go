package publish

import (
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// Step 2 of the pipeline: plan. The plan itself is model.PlanMap, pure; here the map's
// hostname is derived first (the annotation, else the --host-template).

// hostnamer derives a map's hostname (httproute.Config.Hostname).
type hostnamer interface {
	Hostname(src httproute.Source) (string, error)
}

// planMap makes the plan for the gathered map with its hostname from hosts. A
// *model.UserError means nothing can be published.
func planMap(hosts hostnamer, g model.Gathered) (*model.Planned, error) {
	tm := g.Inputs.TrafficMap
	g.Hostname, g.HostnameErr = hosts.Hostname(httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service, GlobalHost: g.GlobalHost})
	return model.PlanMap(g)
}
