import Metrics
import OpsServer
import Prometheus
import Relay

/// swift-metrics backed by a Prometheus registry, with buckets that fit the relay's timings.
enum RelayMetricsSystem {
    /// - Parameter mode: when set, every metric carries a `mode` label with it (`replay`),
    ///   so a replay's series never mix with the live relay's in one query.
    static func bootstrap(version: String, mode: String? = nil) -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = [
            "fleet_relay_fleet_engine_request_seconds": [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 15000]
                .map { Duration.milliseconds($0) },
            "fleet_relay_end_to_end_seconds": [50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000]
                .map { Duration.milliseconds($0) },
            "fleet_relay_revoke_wait_seconds": [10, 100, 500, 1000, 2500, 5000, 10000, 15000, 20000, 30000, 60000]
                .map { Duration.milliseconds($0) },
        ]
        factory.valueHistogramBuckets = [
            "fleet_relay_coalesced_per_request": [1, 2, 3, 5, 10, 20, 50, 100],
        ]
        if let mode {
            MetricsSystem.bootstrap(LabelAddingMetricsFactory(base: factory, label: ("mode", mode)))
        } else {
            MetricsSystem.bootstrap(factory)
        }
        Gauge(label: "fleet_relay_build_info", dimensions: [("version", version)]).record(1)
        return registry
    }
}

/// Adds one fixed label to every metric another factory makes.
struct LabelAddingMetricsFactory: MetricsFactory {
    let base: any MetricsFactory
    let label: (String, String)

    private func with(_ dimensions: [(String, String)]) -> [(String, String)] { dimensions + [label] }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        base.makeCounter(label: label, dimensions: with(dimensions))
    }
    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        base.makeFloatingPointCounter(label: label, dimensions: with(dimensions))
    }
    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        base.makeMeter(label: label, dimensions: with(dimensions))
    }
    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        base.makeRecorder(label: label, dimensions: with(dimensions), aggregate: aggregate)
    }
    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        base.makeTimer(label: label, dimensions: with(dimensions))
    }
    func destroyCounter(_ handler: any CounterHandler) { base.destroyCounter(handler) }
    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) { base.destroyFloatingPointCounter(handler) }
    func destroyMeter(_ handler: any MeterHandler) { base.destroyMeter(handler) }
    func destroyRecorder(_ handler: any RecorderHandler) { base.destroyRecorder(handler) }
    func destroyTimer(_ handler: any TimerHandler) { base.destroyTimer(handler) }
}

extension OpsServer.Check {
    init(_ check: RelayHealth.Check) {
        self.init(name: check.name, ok: check.ok, detail: check.detail)
    }
}
