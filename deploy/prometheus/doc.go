// Package prometheus holds QMQ's Prometheus alert rules (qmq-rules.yaml) and
// an example scrape configuration (prometheus.yml); deploy/grafana holds the
// dashboard. Its test checks the rules with promtool, runs a real Prometheus
// scraping a metaserver and a broker on loopback with the rules loaded,
// checks that every metric the rules and the dashboard name is served and
// that every alert expression evaluates, and makes the leaderless broker
// group's alert fire.
package prometheus
