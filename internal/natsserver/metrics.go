package natsserver

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the server's own counters as Prometheus metrics, read at each scrape (the
// server's monitoring data, the same as its /varz and /connz): messages and bytes in and out,
// connections, subscriptions, slow consumers, JetStream's usage and API calls, and the bytes
// queued to be written to clients: a client reading slower than the server delivers to it (a
// node past its capacity) shows there first, before the server cuts it off as a slow consumer.
func (s *Server) Collector() prometheus.Collector { return &collector{s: s.Server} }

type collector struct{ s *server.Server }

var (
	descInMsgs      = prometheus.NewDesc("tickfence_nats_in_msgs_total", "Messages the NATS server received (from clients and routes).", nil, nil)
	descOutMsgs     = prometheus.NewDesc("tickfence_nats_out_msgs_total", "Messages the NATS server sent (to clients and routes).", nil, nil)
	descInBytes     = prometheus.NewDesc("tickfence_nats_in_bytes_total", "Payload bytes the NATS server received.", nil, nil)
	descOutBytes    = prometheus.NewDesc("tickfence_nats_out_bytes_total", "Payload bytes the NATS server sent.", nil, nil)
	descSlow        = prometheus.NewDesc("tickfence_nats_slow_consumers_total", "Clients the NATS server cut off for reading too slowly.", nil, nil)
	descConns       = prometheus.NewDesc("tickfence_nats_connections", "Client connections open.", nil, nil)
	descSubs        = prometheus.NewDesc("tickfence_nats_subscriptions", "Subscriptions in the NATS server.", nil, nil)
	descPending     = prometheus.NewDesc("tickfence_nats_pending_bytes", "Bytes queued in the NATS server to be written to its clients, all of them.", nil, nil)
	descPendingMax  = prometheus.NewDesc("tickfence_nats_pending_bytes_max", "Bytes queued in the NATS server to be written to one client, the most of any.", nil, nil)
	descJSStore     = prometheus.NewDesc("tickfence_nats_jetstream_storage_bytes", "Bytes JetStream keeps on disk.", nil, nil)
	descJSMemory    = prometheus.NewDesc("tickfence_nats_jetstream_memory_bytes", "Bytes JetStream keeps in memory.", nil, nil)
	descJSAPI       = prometheus.NewDesc("tickfence_nats_jetstream_api_requests_total", "JetStream API requests (creating and reading buckets and streams; not writes).", nil, nil)
	descJSAPIErrors = prometheus.NewDesc("tickfence_nats_jetstream_api_errors_total", "JetStream API requests answered with an error.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInMsgs, descOutMsgs, descInBytes, descOutBytes, descSlow, descConns, descSubs,
		descPending, descPendingMax, descJSStore, descJSMemory, descJSAPI, descJSAPIErrors} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	v, err := c.s.Varz(nil)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descInMsgs, err)
		return
	}
	counter := func(d *prometheus.Desc, x float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, x)
	}
	gauge := func(d *prometheus.Desc, x float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x) }
	counter(descInMsgs, float64(v.InMsgs))
	counter(descOutMsgs, float64(v.OutMsgs))
	counter(descInBytes, float64(v.InBytes))
	counter(descOutBytes, float64(v.OutBytes))
	counter(descSlow, float64(v.SlowConsumers))
	gauge(descConns, float64(v.Connections))
	gauge(descSubs, float64(v.Subscriptions))
	if js := v.JetStream.Stats; js != nil {
		gauge(descJSStore, float64(js.Store))
		gauge(descJSMemory, float64(js.Memory))
		counter(descJSAPI, float64(js.API.Total))
		counter(descJSAPIErrors, float64(js.API.Errors))
	}
	// Connz pages by at most 1024 connections; a node keeps three, a test cluster a few dozen.
	var sum, most int
	for offset := 0; ; {
		cz, err := c.s.Connz(&server.ConnzOptions{Offset: offset, Limit: 1024})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descPending, err)
			return
		}
		for _, ci := range cz.Conns {
			sum += ci.Pending
			most = max(most, ci.Pending)
		}
		offset += len(cz.Conns)
		if len(cz.Conns) == 0 || offset >= cz.Total {
			break
		}
	}
	gauge(descPending, float64(sum))
	gauge(descPendingMax, float64(most))
}
