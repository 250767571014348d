import Foundation
@testable import HTTPServing
import JSON
import Prometheus
import Synchronization
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@testable import OpsServer

@Suite struct OpsServerTests {
    let registry = PrometheusCollectorRegistry()

    func get(_ path: String, method: String = "GET", liveness: [OpsServer.Check] = [], readiness: [OpsServer.Check] = []) -> HTTPResponse {
        let request = HTTPRequest(method: method, path: path, query: [:], headers: [], body: [])
        return OpsServer.respond(to: request, registry: registry, help: ["requests_total": "Requests served."],
                                 liveness: { liveness }, readiness: { readiness })
    }

    @Test func metricsArePrometheusTextWithHelpLines() {
        registry.makeCounter(descriptor: MetricNameDescriptor(metricName: "requests", unitName: "total", helpText: ""),
                             labels: [("kind", "a")]).increment(by: Int64(3))
        let response = get("/metrics")
        #expect(response.status == 200)
        #expect(response.headers.contains { $0.name == "Content-Type" && $0.value.hasPrefix("text/plain; version=0.0.4") })
        let text = String(decoding: response.body, as: UTF8.self)
        #expect(text.contains("# HELP requests_total Requests served.\n# TYPE requests_total counter\n"))
        #expect(text.contains("requests_total{kind=\"a\"} 3"))
    }

    @Test func readinessNamesEveryFailingCheck() throws {
        let checks = [OpsServer.Check(name: "consumer_group", ok: true, detail: "joined"),
                      OpsServer.Check(name: "fleet_engine", ok: false, detail: "unavailable for 61 s")]
        let response = get("/readyz", readiness: checks)
        #expect(response.status == 503)
        let body = try JSONParser.parse(response.body)
        #expect(body["status"] == .string("failing"))
        #expect(body["failing"] == .string("fleet_engine"))
        #expect(body["checks"]?["fleet_engine"]?["detail"] == .string("unavailable for 61 s"))
        #expect(get("/readyz", readiness: [checks[0]]).status == 200)
    }

    @Test func livenessAndUnknownPaths() {
        #expect(get("/healthz", liveness: [OpsServer.Check(name: "kafka_poll_loop", ok: true, detail: "")]).status == 200)
        #expect(get("/healthz", liveness: [OpsServer.Check(name: "kafka_poll_loop", ok: false, detail: "")]).status == 503)
        #expect(get("/").status == 404)
        #expect(get("/metrics/../secrets").status == 404)
        #expect(get("/metrics", method: "POST").status == 405)
    }

    /// Gauges read from a service's state are brought up to date by each scrape, not by a
    /// timer: a scrape shows them as of the scrape, and nothing runs between scrapes.
    @Test func everyScrapeBringsTheGaugesUpToDateFirst() async throws {
        let scrapes = Mutex(0)
        let gauge = registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "scrapes_seen", unitName: "", helpText: ""))
        let ops = try await OpsServer(host: "127.0.0.1", port: 0, registry: registry,
                                      beforeScrape: { gauge.set(Double(scrapes.withLock { $0 += 1; return $0 })) },
                                      liveness: { [] }, readiness: { [] })
        func scrape(_ path: String = "/metrics") async throws -> String {
            let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(ops.port)\(path)")!)
            return String(decoding: data, as: UTF8.self)
        }
        #expect(try await scrape().contains("scrapes_seen 1.0"))
        _ = try await scrape("/readyz")
        #expect(try await scrape().contains("scrapes_seen 2.0"), "a probe is no scrape")
        await ops.shutdown()
    }
}
