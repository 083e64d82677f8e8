// Package deploy holds what operators load next to tickfence's Prometheus metrics: the Grafana
// dashboard (grafana/tickfence.json, for Grafana 10+) and the Prometheus alerting rules
// (prometheus/tickfence-alerts.yml). They are embedded so tools can ship them as they are;
// deploy_test.go checks both against the metrics tickfence really exports.
package deploy

import _ "embed"

// Dashboard is the Grafana dashboard JSON (a datasource variable picks the Prometheus).
//
//go:embed grafana/tickfence.json
var Dashboard []byte

// Alerts is the Prometheus rule file of tickfence's alerts.
//
//go:embed prometheus/tickfence-alerts.yml
var Alerts []byte
