import AsyncHTTPClient
import Foundation
import JSON
import Kafka
import Logging
import NIOCore
import Synchronization

/// Reads state over HTTP and Kafka: the emulator's statistics, the relay's
/// readiness and metrics, a group's committed offsets.
struct Probes {
    let emulatorURL: String
    let kafka: KafkaConfiguration
    /// Trusts the HTTPS emulator's throwaway CA.
    let http: HTTPClient
    let logger: Logger
    /// One Kafka client per group, reused: lag is polled every second or so.
    private let inspectors = Inspectors()

    init(emulatorURL: String, kafka: KafkaConfiguration, http: HTTPClient, logger: Logger) {
        self.emulatorURL = emulatorURL
        self.kafka = kafka
        self.http = http
        self.logger = logger
    }

    func get(_ url: String) async -> (status: Int, body: String)? {
        do {
            let response = try await http.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 16 << 20)
            return (Int(response.status.code), String(buffer: body))
        } catch {
            return nil
        }
    }

    func post(_ url: String) async {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        _ = try? await http.execute(request, timeout: .seconds(10))
    }

    /// The emulator's `/_emulator/statistics`.
    func emulator(newerThan: Int64? = nil, idPrefix: String = "") async -> JSONValue {
        let query = newerThan.map { "?newer_than=\($0)&id_prefix=\(idPrefix)" } ?? ""
        guard let (status, body) = await get(emulatorURL + "/_emulator/statistics" + query), status == 200,
            let statistics = try? JSONParser.parse(body)
        else { return .null }
        return statistics
    }

    /// Starts the emulator's latency percentiles afresh, counting only fixes located from
    /// `locatedAfter` on (milliseconds since the epoch; default: now).
    func resetLatency(locatedAfter: Int64? = nil) async {
        let after = locatedAfter ?? Int64(Date().timeIntervalSince1970 * 1000)
        await post(emulatorURL + "/_emulator/reset-latency?located_after=\(after)")
    }

    /// Sets the emulator's project quota in requests per second (nil lifts it) and the time each answer takes.
    func setQuota(_ rps: Double?, latencyMilliseconds: Int = 0) async {
        await post(emulatorURL + "/_emulator/quota?rps=\(rps ?? 0)&latency_ms=\(latencyMilliseconds)")
    }

    func isReady(metricsPort: Int) async -> Bool {
        await get("http://127.0.0.1:\(metricsPort)/readyz")?.status == 200
    }

    /// The sum of a metric's samples in the relay's /metrics, of those whose labels contain `matching` (`outcome="stale"`).
    func metric(_ name: String, matching: String = "", metricsPort: Int) async -> Double {
        guard let body = await get("http://127.0.0.1:\(metricsPort)/metrics")?.body else { return 0 }
        return body.split(separator: "\n").reduce(0) { sum, line in
            guard line.hasPrefix(name + "{") || line.hasPrefix(name + " "), matching.isEmpty || line.contains(matching) else { return sum }
            return sum + (line.split(separator: " ").last.flatMap { Double($0) } ?? 0)
        }
    }

    /// The sum as `metric` has it, or nil when the relay has no such metric (an older build).
    func metricIfPresent(_ name: String, matching: String = "", metricsPort: Int) async -> Double? {
        guard let body = await get("http://127.0.0.1:\(metricsPort)/metrics")?.body else { return nil }
        let lines = body.split(separator: "\n").filter {
            ($0.hasPrefix(name + "{") || $0.hasPrefix(name + " ")) && (matching.isEmpty || $0.contains(matching))
        }
        guard !lines.isEmpty else { return nil }
        return lines.reduce(0) { $0 + ($1.split(separator: " ").last.flatMap { Double($0) } ?? 0) }
    }

    /// Requests of the relay the quota admitted; its update requests for a build that does not
    /// count them (before the quota counters).
    func admittedRequests(metricsPort: Int) async -> Double {
        if let admitted = await metricIfPresent("fleet_relay_quota_requests_total", matching: "result=\"admitted\"", metricsPort: metricsPort) {
            return admitted
        }
        return await metric("fleet_relay_fleet_engine_requests_total", metricsPort: metricsPort)
    }

    /// Records the relay finished without sending them, each for a counted reason.
    func finishedUnsent(metricsPort: Int) async -> Double {
        var total = 0.0
        for outcome in ["stale", "dead_lettered"] {
            total += await metric("fleet_relay_records_finished_total", matching: "outcome=\"\(outcome)\"", metricsPort: metricsPort)
        }
        return total
    }

    /// Destroys the Kafka clients while the mock cluster still runs: left to the end of the
    /// process, they would outlive it and log every failed reconnect.
    func closeKafkaClients() {
        inspectors.closeAll()
    }

    /// High watermark minus committed offset, summed over the topic's partitions.
    func lag(topic: String, partitions: Int, group: String) async throws -> Int64 {
        let inspector = try inspectors.inspector(for: group, kafka: kafka, logger: logger)
        let committed = try await inspector.committedOffsets(topic: topic, partitions: partitions)
        let high = try await inspector.highWatermarks(topic: topic, partitions: partitions)
        return high.reduce(0) { sum, entry in sum + entry.value - ((committed[entry.key] ?? nil) ?? 0) }
    }
}

extension Probes {
    /// Records the topic holds: its high watermarks, summed over its partitions.
    func recordsInKafka(topic: String, partitions: Int, group: String) async throws -> Int64 {
        let inspector = try inspectors.inspector(for: group, kafka: kafka, logger: logger)
        return try await inspector.highWatermarks(topic: topic, partitions: partitions).values.reduce(0, +)
    }
}

/// Waits until `condition` holds, polling every `interval`; false at the deadline.
func waitUntil(timeout: Duration, interval: Duration = .milliseconds(100), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return false
}

private final class Inspectors: Sendable {
    private let byGroup = Mutex<[String: KafkaInspector]>([:])

    func inspector(for group: String, kafka: KafkaConfiguration, logger: Logger) throws -> KafkaInspector {
        try byGroup.withLock { byGroup in
            if let inspector = byGroup[group] { return inspector }
            let inspector = try KafkaInspector(configuration: kafka, group: group, logger: logger)
            byGroup[group] = inspector
            return inspector
        }
    }

    func closeAll() {
        byGroup.withLock { $0.removeAll() }
    }
}

/// CPU seconds (user and system) this process has used so far.
func processCPUSeconds() -> Double {
    cpuSeconds(RUSAGE_SELF.rawValue)
}

/// CPU seconds of the child processes that ended and were waited for so far.
func childProcessesCPUSeconds() -> Double {
    cpuSeconds(RUSAGE_CHILDREN.rawValue)
}

private func cpuSeconds(_ who: Int32) -> Double {
    var usage = rusage()
    getrusage(who, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}
