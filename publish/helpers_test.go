package publish

import (
	"time"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func claim(ns, name string, age int, names ...string) model.Claim {
	return model.Claim{Kind: model.KindTrafficMap, Namespace: ns, Name: name, Created: t0.Add(time.Duration(age) * time.Minute), Names: names}
}

func fleetMap() *v1beta1.TrafficMap {
	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
	}}}
	tm.Name, tm.Namespace = "chat", "prod"
	return tm
}
