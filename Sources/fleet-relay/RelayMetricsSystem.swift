import Metrics
import OpsServer
import Prometheus
import Relay

/// swift-metrics backed by a Prometheus registry, with buckets that fit the relay's timings.
enum RelayMetricsSystem {
    static func bootstrap(version: String) -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = [
            "fleet_relay_fleet_engine_request_seconds": [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 15000]
                .map { Duration.milliseconds($0) },
            "fleet_relay_end_to_end_seconds": [50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000]
                .map { Duration.milliseconds($0) },
        ]
        factory.valueHistogramBuckets = [
            "fleet_relay_batch_records": [1, 10, 50, 100, 250, 500, 1000, 5000],
            "fleet_relay_coalesced_per_request": [1, 2, 3, 5, 10, 20, 50, 100],
        ]
        MetricsSystem.bootstrap(factory)
        Gauge(label: "fleet_relay_build_info", dimensions: [("version", version)]).record(1)
        return registry
    }
}

extension OpsServer.Check {
    init(_ check: RelayHealth.Check) {
        self.init(name: check.name, ok: check.ok, detail: check.detail)
    }
}
