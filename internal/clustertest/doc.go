// Package clustertest holds the process-level tests of a tickfence cluster: a `tickd server`
// process and `tickd` node processes, built once without -race, killed, frozen and drained for
// real. Only its tests have code.
package clustertest
