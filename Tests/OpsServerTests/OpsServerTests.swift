import Foundation
import JSON
import NIOCore
import NIOPosix
import Prometheus
import Synchronization
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@testable import OpsServer

@Suite struct OpsServerTests {
    let registry = PrometheusCollectorRegistry()

    func get(_ path: String, method: String = "GET", liveness: [OpsServer.Check] = [], readiness: [OpsServer.Check] = []) -> OpsResponse {
        OpsServer.respond(method: method, path: path, registry: registry, help: ["requests_total": "Requests served."],
                          liveness: { liveness }, readiness: { readiness })
    }

    @Test func metricsArePrometheusTextWithHelpLines() {
        registry.makeCounter(descriptor: MetricNameDescriptor(metricName: "requests", unitName: "total", helpText: ""),
                             labels: [("kind", "a")]).increment(by: Int64(3))
        let response = get("/metrics")
        #expect(response.status == 200)
        #expect(response.contentType.hasPrefix("text/plain; version=0.0.4"))
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

/// The ops endpoint's own server on the wire: what a scraper or a kubelet probe sees.
@Suite struct OpsHTTPServerTests {
    /// What a connection read, and who waits for enough of it.
    final class Transcript: Sendable {
        let text = Mutex("")
        private let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let isEnough: @Sendable (String) -> Bool

        init(isEnough: @escaping @Sendable (String) -> Bool) {
            self.isEnough = isEnough
        }

        func append(_ bytes: String) {
            if isEnough(text.withLock { $0 += bytes; return $0 }) { finish() }
        }

        func finish() { waiter.withLock { $0.take() }?.resume() }

        func wait(_ start: () -> Void) async {
            await withCheckedContinuation { continuation in
                waiter.withLock { $0 = continuation }
                start()
            }
        }
    }

    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let transcript: Transcript
        init(_ transcript: Transcript) { self.transcript = transcript }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            transcript.append(String(buffer: unwrapInboundIn(data)))
        }
    }

    /// Writes `requests` on one TCP connection and returns everything read until the server
    /// closed it (marked `<closed>`) or `isEnough` accepts what was read.
    func exchange(port: Int, _ requests: String, until isEnough: @escaping @Sendable (String) -> Bool) async throws -> String {
        let transcript = Transcript(isEnough: isEnough)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Collector(transcript)) }
            }
            .connect(host: "127.0.0.1", port: port).get()
        await transcript.wait {
            channel.closeFuture.whenComplete { _ in transcript.finish() }
            // A server that neither answers enough nor closes fails the test instead of hanging it.
            channel.eventLoop.scheduleTask(in: .seconds(10)) { transcript.finish() }
            channel.writeAndFlush(ByteBuffer(string: requests), promise: nil)
        }
        let open = channel.isActive
        try? await channel.close()
        return transcript.text.withLock { $0 } + (open ? "" : "<closed>")
    }

    func startOps(liveness: [OpsServer.Check] = []) async throws -> OpsServer {
        try await OpsServer(host: "127.0.0.1", port: 0, registry: PrometheusCollectorRegistry(),
                            liveness: { liveness }, readiness: { [] })
    }

    @Test func probesShareAKeepAliveConnectionAndAHeadAnswerHasNoBody() async throws {
        let ops = try await startOps(liveness: [OpsServer.Check(name: "kafka_poll_loop", ok: true, detail: "")])
        let requests = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nHEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
        let text = try await exchange(port: ops.port, requests) { $0.contains("not found\n") }
        // A body ends without a line break: a status line follows it directly.
        // (By bytes: a Swift string holds "\r\n" as one character.)
        let statusLines = text.replacingOccurrences(of: "HTTP/1.1 ", with: "\nHTTP/1.1 ").utf8
            .split(whereSeparator: { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") })
            .map { String(decoding: $0, as: UTF8.self) }.filter { $0.hasPrefix("HTTP/1.1 ") }
        #expect(statusLines == ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found"], "\(text)")
        #expect(text.components(separatedBy: "\"status\":\"ok\"").count == 2, "one body for GET, none for HEAD: \(text)")
        #expect(!text.hasSuffix("<closed>"), "kept alive")
        await ops.shutdown()
    }

    @Test func aRequestAskingToCloseIsAnsweredAndClosed() async throws {
        let ops = try await startOps()
        let text = try await exchange(port: ops.port, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") { _ in false }
        #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(text)")
        #expect(text.lowercased().contains("connection: close"))
        #expect(text.hasSuffix("<closed>"))
        await ops.shutdown()
    }

    @Test func somethingThatIsNotHTTPIsAnsweredWithABadRequestAndClosed() async throws {
        let ops = try await startOps()
        // A TLS ClientHello's first bytes: the ops endpoint speaks plain HTTP only.
        let text = try await exchange(port: ops.port, "\u{16}\u{03}\u{01}\u{02}\u{00}\u{01}\u{00}\u{01}\u{fc}\u{03}\u{03}\r\n\r\n") { _ in false }
        #expect(text.hasPrefix("HTTP/1.1 400 Bad Request"), "\(text)")
        #expect(text.hasSuffix("<closed>"))
        await ops.shutdown()
    }
}
