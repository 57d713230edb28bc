// Package agent will run on edge nodes: registration through any replica,
// gossip membership, the assignment watch, execution of attempts as
// subprocesses under resource limits, a watchdog, fenced result reports
// and local logs. It talks to the servers only through the api client.
package agent
