import Egress
import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetSimulator
import Foundation
import HTTPServing
import JSON
import Logging
import Relay
import Synchronization
import Testing

/// The production path: HTTPS to Fleet Engine, HTTP/2 where ALPN offers it, through a
/// proxy when the environment names one; with the faults Google's front ends produce.
@Suite(.serialized) struct TransportTests {
    @Test(arguments: [Egress.HTTPVersion.automatic, .http1])
    func deliversEveryFixOverHTTPS(httpVersion: Egress.HTTPVersion) async throws {
        let harness = try await RelayHarness(partitions: 4, https: true)
        defer { Task { await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 40, fixesPerVehicle: 10)
        try await harness.produce(generated.events.map(\.record))
        let relay = try harness.startRelay(group: "https-\(httpVersion.rawValue)", egress: try harness.egress(httpVersion: httpVersion))
        try await harness.waitUntilEverythingIsDelivered(generated, group: "https-\(httpVersion.rawValue)")
        try await relay.stop()

        #expect(harness.emulatorURL.hasPrefix("https://"))
        #expect(harness.lostEvents(generated.events).count == 0, "every fix by identity")
        #expect(harness.backwardsUpdates == 0)
        let transport = try #require(harness.emulator.transportStatistics)
        if httpVersion == .automatic {
            #expect(transport.http2Requests >= 40, "ALPN chose HTTP/2")
            #expect(transport.http1Requests == 0)
        } else {
            #expect(transport.http1Requests >= 40)
            #expect(transport.http2Requests == 0)
        }
    }

    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func goAwaysAndStreamResetsLoseNothingAndStrandNoRequest(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 4, https: true,
                                             http2: .init(goAwayEveryRequests: 500, resetShare: 0.01))
        defer { Task { await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 500, fixesPerVehicle: 12)
        try await harness.produce(generated.events.map(\.record))
        // One fix per request, so that the run crosses several GOAWAYs.
        let relay = try harness.startRelay(group: "goaway", requestTimeout: .seconds(10), wireProtocol: wireProtocol) { configuration in
            configuration.pastLocationsLimit = 0
        }
        try await harness.waitUntilEverythingIsDelivered(generated, group: "goaway")
        let statistics = relay.relay.statistics.snapshot
        try await relay.stop()

        let transport = try #require(harness.emulator.transportStatistics)
        #expect(transport.goAwaysSent >= 3, "the run crossed GOAWAYs (\(transport.goAwaysSent))")
        #expect(transport.streamsReset >= 5, "streams were reset (\(transport.streamsReset))")
        #expect(transport.connections > transport.goAwaysSent, "a new connection after each GOAWAY")
        #expect(harness.lostEvents(generated.events).count == 0)
        #expect(harness.backwardsUpdates == 0)
        #expect(statistics.timeouts == 0, "no request waited for its timeout: resets and GOAWAYs end requests at once")
        harness.expectServed(over: wireProtocol)
        #expect(statistics.retries <= transport.streamsReset,
                "only reset streams were retried: a stream above a GOAWAY's last one goes out again at once, on a new connection")
    }

    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func anUntrustedCertificateSendsNothingAndSaysWhyUntilTheRightCAIsGiven(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 2, https: true)
        defer { Task { await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 10, fixesPerVehicle: 2)
        try await harness.produce(generated.events.map(\.record))
        let logs = CapturedLogs()
        // The system's trust store only: the emulator's throwaway CA is not in it.
        let untrusting = try harness.startRelay(group: "tls", egress: try Egress.load(caFiles: []), wireProtocol: wireProtocol,
                                                logger: logs.logger) { configuration in
            configuration.readyMaximumOutage = .seconds(600)
        }
        try await eventually("readiness names the TLS failure") {
            untrusting.relay.health.readiness.contains { $0.name == "fleet_engine" && !$0.ok && $0.detail.contains("tls") }
        }
        try await untrusting.stop()

        #expect(harness.emulator.statistics.updateRequests == 0, "nothing was sent over an unverified connection")
        #expect(harness.emulator.statistics.requests == 0)
        let tlsLines = logs.lines.filter { $0.contains("outage began (tls") }
        #expect(tlsLines.count == 1, "the TLS reason is logged once: \(logs.lines)")
        #expect(tlsLines.first?.contains("certificate verify failed") ?? false, "the line says what is wrong: \(tlsLines)")
        #expect(tlsLines.first?.contains("--ca-file") ?? false, "and what mends it: \(tlsLines)")
        #expect(try await harness.committedOffsets(group: "tls").values.allSatisfy { $0 == nil }, "nothing committed")

        // The same group with the right --ca-file: everything goes out.
        let trusting = try harness.startRelay(group: "tls", wireProtocol: wireProtocol)
        try await harness.waitUntilEverythingIsDelivered(generated, group: "tls")
        try await trusting.stop()
        #expect(harness.lostEvents(generated.events).count == 0)
        harness.expectServed(over: wireProtocol)
    }

    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func httpsProxyFromTheEnvironmentCarriesTheTraffic(over wireProtocol: FleetEngineProtocol) async throws {
        let (tunnels, emulatorURL) = try await tunnelsWhileDelivering(
            environment: { ["HTTPS_PROXY": $0, "NO_PROXY": "metadata.google.internal,.svc.cluster.local"] }, over: wireProtocol)
        let port = try #require(emulatorURL.split(separator: ":").last)
        #expect(tunnels.count >= 1)
        #expect(tunnels.allSatisfy { $0 == "127.0.0.1:\(port)" }, "tunnels to the emulator: \(tunnels)")
    }

    @Test func noProxyNamesHostsReachedDirectly() async throws {
        let (tunnels, _) = try await tunnelsWhileDelivering(environment: { ["https_proxy": $0, "no_proxy": "example.com, 127.0.0.0/8"] })
        #expect(tunnels.isEmpty, "NO_PROXY's 127.0.0.0/8 bypasses the proxy: \(tunnels)")
    }

    /// Delivers a backlog (every fix checked) with the proxy environment `environment(proxyURL)`;
    /// returns the tunnels the proxy opened meanwhile and the emulator's URL.
    private func tunnelsWhileDelivering(environment: (String) -> [String: String],
                                        over wireProtocol: FleetEngineProtocol = .rest) async throws -> ([String], String) {
        let harness = try await RelayHarness(partitions: 2, https: true)
        let proxy = try await ConnectProxy.start()
        defer { Task { await proxy.shutdown(); await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 20, fixesPerVehicle: 3)
        try await harness.produce(generated.events.map(\.record))
        let egress = try harness.egress(proxy: try EgressProxy.from(environment: environment(proxy.url)))
        let relay = try harness.startRelay(group: "proxy", egress: egress, wireProtocol: wireProtocol)
        try await harness.waitUntilEverythingIsDelivered(generated, group: "proxy")
        try await relay.stop()
        #expect(harness.lostEvents(generated.events).count == 0)
        harness.expectServed(over: wireProtocol)
        return (proxy.tunnels, harness.emulatorURL)
    }
}

/// Unit checks of how the proxy environment is read.
@Suite struct EgressProxyTests {
    @Test func readsTheProxyAndItsCredentialsWithoutEchoingThem() throws {
        let proxy = try EgressProxy.from(environment: ["HTTPS_PROXY": "http://user:s3cret%21@proxy.corp:3128"])
        let server = try #require(proxy.server)
        #expect(server.address == "proxy.corp:3128")
        #expect(server.credentials?.user == "user")
        #expect(server.credentials?.password == "s3cret!")

        for bad in ["http://user:sentinel-pw@:3128", "http://user:sentinel-pw@proxy:99999", "socks5://user:sentinel-pw@proxy:1080"] {
            let error = #expect(throws: EgressError.self) { try EgressProxy.from(environment: ["HTTPS_PROXY": bad]) }
            #expect(!(error?.description.contains("sentinel-pw") ?? true), "no password in \(error?.description ?? "")")
        }
    }

    @Test func noProxyFollowsCurlsRules() throws {
        let proxy = try EgressProxy.from(environment: [
            "HTTPS_PROXY": "proxy:3128", "NO_PROXY": "internal.example, .corp.example,10.0.0.0/8,[::1],localhost:8443",
        ])
        #expect(proxy.server?.port == 3128)
        #expect(proxy.server(forHost: "fleetengine.googleapis.com") != nil)
        #expect(proxy.server(forHost: "internal.example") == nil)
        #expect(proxy.server(forHost: "api.internal.example") == nil)
        #expect(proxy.server(forHost: "corp.example") == nil)
        #expect(proxy.server(forHost: "a.b.corp.example") == nil)
        #expect(proxy.server(forHost: "notcorp.example") != nil)
        #expect(proxy.server(forHost: "10.1.2.3") == nil)
        #expect(proxy.server(forHost: "11.1.2.3") != nil)
        #expect(proxy.server(forHost: "::1") == nil)
        #expect(proxy.server(forHost: "localhost") == nil)
        #expect(try EgressProxy.from(environment: ["HTTPS_PROXY": "proxy:3128", "NO_PROXY": "*"]).server(forHost: "any.host") == nil)
        #expect(try EgressProxy.from(environment: [:]).server(forHost: "any.host") == nil)
    }
}

/// Log lines a relay wrote, for checks of what an operator sees.
final class CapturedLogs: Sendable {
    private let store = Mutex<[String]>([])

    var lines: [String] { store.withLock { $0 } }

    var logger: Logger {
        Logger(label: "captured") { _ in CapturingLogHandler(logs: self) }
    }

    fileprivate func append(_ line: String) { store.withLock { $0.append(line) } }
}

private struct CapturingLogHandler: LogHandler {
    let logs: CapturedLogs
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        logs.append("\(event.level) \(event.message) \(event.metadata ?? [:])")
    }
}

extension TransportTests {
    /// The binary reaches Fleet Engine by name, as in production: every TLS connection asks
    /// for that name (SNI) and the certificate must be issued for it. One from a trusted CA
    /// that names another host is refused, nothing is sent, and the log says why.
    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func theRelayAsksForTheHostByNameAndRefusesACertificateIssuedForAnother(over wireProtocol: FleetEngineProtocol) async throws {
        let elsewhere = try await RelayHarness(partitions: 1, certificateNames: ["fleet.elsewhere.example"])
        try await elsewhere.produce(GeneratedEvents(vehicles: 3, fixesPerVehicle: 1).events.map(\.record))
        let refusing = try IntegrationTests.CommandLineTests.RunningProcess(relayArguments(elsewhere, group: "wrong-name", over: wireProtocol))
        refusing.watchLog()
        try await eventually("the log says the certificate names another host", timeout: .seconds(60)) {
            refusing.log.contains("does not name the host")
        }
        refusing.process.terminate()
        _ = await refusing.finish()
        #expect(elsewhere.emulator.statistics.requests == 0, "nothing sent over a connection to the wrong host")
        #expect(elsewhere.emulator.serverNames.requested.contains("localhost"), "\(elsewhere.emulator.serverNames.requested)")
        #expect(try await elsewhere.committedOffsets(group: "wrong-name").values.allSatisfy { $0 == nil }, "nothing committed")
        await elsewhere.shutdown()

        let harness = try await RelayHarness(partitions: 1)
        let generated = GeneratedEvents(vehicles: 10, fixesPerVehicle: 2)
        try await harness.produce(generated.events.map(\.record))
        let relay = try IntegrationTests.CommandLineTests.RunningProcess(relayArguments(harness, group: "by-name", over: wireProtocol))
        try await harness.waitUntilEverythingIsDelivered(generated, group: "by-name")
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "\(result.stderrExcerpt(2000))")
        let names = harness.emulator.serverNames.requested
        #expect(!names.isEmpty && names.allSatisfy { $0 == "localhost" }, "every connection asked for localhost: \(names)")
        harness.expectServed(over: wireProtocol)
        await harness.shutdown()
    }

    /// `fleet-relay run` against the harness's emulator, reached as `localhost`.
    private func relayArguments(_ harness: RelayHarness, group: String, over wireProtocol: FleetEngineProtocol) throws -> [String] {
        [
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", group,
            "--key-file", harness.writeKeyFile(), "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000",
            "--fleet-engine-url", harness.emulatorURL.replacingOccurrences(of: "127.0.0.1", with: "localhost"),
            "--metrics-port", String(try freeLoopbackPort()), "--log-format", "text", "--fleet-engine-protocol", wireProtocol.rawValue,
        ]
    }
}

extension TransportTests {
    /// Requests the server certainly did not process — above a GOAWAY's last stream ID, or
    /// refused with REFUSED_STREAM — go out again at once on a new connection, once: each
    /// stream the emulator left unprocessed is resent, or (left unprocessed a second time)
    /// retried for its cause `connection`; no fix arrives twice and nothing is lost.
    ///
    /// The emulator counts every such stream, at the connection layer too (streams SwiftNIO
    /// refuses because they were opened after the GOAWAY), so the relay's counts must match it
    /// exactly. Retries wait up to 10 s here: a fix left unprocessed that reaches Fleet Engine
    /// more than 2 s later was not resent at once, and only a retried one may.
    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func requestsAboveAGoAwayOrRefusedAreSentAgainAtOnceAndCounted(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 2, http2: .init(goAwayBelowEveryRequests: 40, refuseShare: 0.03))
        let generated = GeneratedEvents(vehicles: 100, fixesPerVehicle: 4)
        let metrics = try await relayEverything(generated, through: harness, group: "unprocessed", over: wireProtocol,
                                                retryMilliseconds: (initial: 10000, maximum: 10000))

        let transport = try #require(harness.emulator.transportStatistics)
        let resent = metricSum(metrics, "fleet_relay_fleet_engine_resent_total")
        let retriedForConnection = metricValue(metrics, "fleet_relay_retries_total", ["cause": "connection"]) ?? 0
        let retries = metricSum(metrics, "fleet_relay_retries_total")
        #expect(transport.goAwaysSent >= 2 && transport.streamsRefused >= 2, "\(transport)")
        let unprocessed = Double(transport.streamsAboveGoAway + transport.streamsRefused)
        #expect(resent + retriedForConnection == unprocessed,
                "every unprocessed stream resent once or, unprocessed again, retried: \(metrics.split(separator: "\n").filter { $0.hasPrefix("fleet_relay_fleet_engine_resent_total{") }), retried \(retriedForConnection), \(transport)")
        #expect(retries == retriedForConnection, "no other retry: \(retries)")
        #expect(resent > retriedForConnection, "most resends are processed")

        let slow = harness.emulator.withheldUpdates.filter { withheld in
            guard let received = harness.emulator.vehicle(withheld.vehicle)?.fixFirstReceived[withheld.fixTime],
                  received > withheld.at else { return false }
            return received - withheld.at > .seconds(2)
        }
        #expect(!harness.emulator.withheldUpdates.isEmpty)
        #expect(Double(slow.count) <= retriedForConnection,
                "\(slow.count) fixes left unprocessed reached Fleet Engine more than 2 s later; \(retriedForConnection) were retried")
        #expect(harness.lostEvents(generated.events).isEmpty)
        #expect(harness.duplicateFixes == 0, "a fix the emulator left unprocessed arrived twice")
        #expect(harness.backwardsUpdates == 0)
        harness.expectServed(over: wireProtocol)
        await harness.shutdown()
    }
}

extension TransportTests {
    /// Produces `generated`, runs the relay over `wireProtocol` (one fix per request) until every
    /// event reached the emulator and its offsets were committed, and stops it, expecting a clean
    /// exit. Returns its metrics, read before it stopped.
    func relayEverything(_ generated: GeneratedEvents, through harness: RelayHarness, group: String,
                         over wireProtocol: FleetEngineProtocol, retryMilliseconds: (initial: Int, maximum: Int)) async throws -> String {
        try await harness.produce(generated.events.map(\.record))
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", group,
            "--key-file", harness.writeKeyFile(), "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000",
            "--fleet-engine-url", harness.emulatorURL, "--metrics-port", String(metricsPort), "--max-past-locations", "0",
            "--retry-initial-ms", String(retryMilliseconds.initial), "--retry-max-ms", String(retryMilliseconds.maximum),
            "--fleet-engine-protocol", wireProtocol.rawValue,
        ])
        do {
            try await harness.waitUntilEverythingIsDelivered(generated, group: group)
        } catch {
            // What the relay was doing when it stalled, for a failure that is hard to repeat.
            let metrics = (try? await httpGet("http://127.0.0.1:\(metricsPort)/metrics").body) ?? ""
            relay.process.terminate()
            let stalled = await relay.finish()
            let progress = metrics.split(separator: "\n").filter { line in
                !line.hasPrefix("#") && ["in_flight", "retries", "retrying", "resent", "finished", "dead_letters", "oldest_unfinished", "paused"]
                    .contains { line.contains($0) }
            }
            Issue.record("""
                \(harness.lostEvents(generated.events).count) events never reached the emulator; the relay's progress:
                \(progress.joined(separator: "\n"))
                its log's end: \(stalled.stderrExcerpt(3000))
                """)
            throw error
        }
        let metrics = try await httpGet("http://127.0.0.1:\(metricsPort)/metrics").body
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "\(result.stderrExcerpt(2000))")
        return metrics
    }

    /// An answer whose header block breaks HTTP/2's rules (here an upper-case field name) is no
    /// answer: the relay resets the stream (PROTOCOL_ERROR) and retries the update for its cause
    /// `connection`, never taking it for an acceptance. The emulator leaves those updates
    /// unapplied, so a relay that believed the malformed 200 would lose their fixes.
    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func aMalformedAnswerIsRetriedNeverTakenForAnAcceptance(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 2, http2: .init(malformedAnswerShare: 0.05))
        let generated = GeneratedEvents(vehicles: 100, fixesPerVehicle: 4)
        let metrics = try await relayEverything(generated, through: harness, group: "malformed", over: wireProtocol,
                                                retryMilliseconds: (initial: 200, maximum: 500))

        let transport = try #require(harness.emulator.transportStatistics)
        let retriedForConnection = metricValue(metrics, "fleet_relay_retries_total", ["cause": "connection"]) ?? 0
        #expect(transport.malformedAnswers >= 5, "\(transport)")
        #expect(retriedForConnection == Double(transport.malformedAnswers), "each malformed answer retried once: \(transport)")
        #expect(metricSum(metrics, "fleet_relay_fleet_engine_resent_total") == 0, "a malformed answer is not safe to resend at once")
        #expect(harness.lostEvents(generated.events).isEmpty)
        #expect(harness.duplicateFixes == 0)
        #expect(harness.backwardsUpdates == 0)
        harness.expectServed(over: wireProtocol)
        await harness.shutdown()
    }
}

extension TransportTests {
    /// `--http-version 2` against a server that offers only HTTP/1.1: nothing is sent over a
    /// protocol the operator ruled out, the log says so in one line, and /readyz answers 503
    /// at once, naming it.
    @Test func http2RequiredAgainstAnHTTP1OnlyServerIsOneLogLineAndNotReady() async throws {
        let harness = try await RelayHarness(partitions: 1, offersHTTP2: false)
        try await harness.produce(GeneratedEvents(vehicles: 10, fixesPerVehicle: 2).events.map(\.record))
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "h2-required",
            "--key-file", harness.writeKeyFile(), "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000",
            "--fleet-engine-url", harness.emulatorURL, "--http-version", "2", "--metrics-port", String(metricsPort),
            "--log-format", "text",
        ])
        relay.watchLog()
        var readiness = (status: 0, body: "")
        try await eventually("/readyz answers 503 naming the HTTP version", timeout: .seconds(120)) {
            guard let answer = try? await httpGet("http://127.0.0.1:\(metricsPort)/readyz") else { return false }  // not up yet
            readiness = (answer.status, answer.body)
            return answer.status == 503 && answer.body.contains("http_version")
        }
        #expect(readiness.body.contains("--http-version 2"), "\(readiness.body)")
        relay.process.terminate()
        _ = await relay.finish()
        let lines = relay.log.split(separator: "\n").filter { $0.contains("did not negotiate HTTP/2") }
        #expect(lines.count == 1, "one line says it: \(lines)")
        #expect(harness.emulator.statistics.requests == 0, "nothing sent over HTTP/1.1")
        #expect(harness.emulator.transportStatistics?.http1Requests == 0)
        await harness.shutdown()
    }
}

extension TransportTests {
    static let proxySentinel = "sentinel-proxy-password-7c3a"

    /// Fleet Engine, the token service and the Schema Registry, all over HTTPS, through a proxy
    /// that wants credentials: with them everything is delivered through its tunnels; with wrong
    /// ones, or through a proxy that refuses CONNECT, nothing gets past it, the relay says so (for
    /// JSON records the signer fails and /readyz names the proxy; for framed records the registry
    /// cannot be asked and the log says why), and the password appears in no log line, error,
    /// metric or readiness answer.
    @Test(arguments: ["credentials", "wrong-credentials", "refusing"], ["json", "avro"])
    func theBinaryGoesThroughAProxyOrSaysWhyNot(_ setup: String, _ input: String) async throws {
        let harness = try await RelayHarness(partitions: 1)
        let tokenService = TokenServiceEmulator(key: harness.key)
        let registry = SchemaRegistryEmulator()
        let peers = try await EmulatorHost.start([tokenService, registry], options: .init(tls: try harness.tls?.serverTLS()))
        let proxy = try await ConnectProxy.start(setup == "refusing" ? .refusing : .credentials(user: "relay", password: Self.proxySentinel))
        var generated = GeneratedEvents(vehicles: 10, fixesPerVehicle: 2)
        if input == "avro" {
            // The simulated fleet's fixes, framed for the registry as Confluent's serializer frames them.
            let encoder = AvroFixEncoder(schemaId: Int32(registry.register(subject: harness.topic + "-value", schema: AvroFixEncoder.schema)))
            var fleet = SimulatedFleet(count: 10)
            let start = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
            let fixes = (0..<2).flatMap { round in
                (0..<10).map { fleet.nextFix(vehicle: $0, seconds: 1, recordedAtMilliseconds: start + Int64(round) * 1000) }
            }
            generated = GeneratedEvents(events: fixes.map {
                .init(vehicle: $0.vehicleId, latitude: $0.latitude, longitude: $0.longitude, recordedAt: $0.recordedAtMilliseconds)
            })
            try await harness.produce(fixes.map(encoder.record(of:)).map { (Optional($0.key), $0.value) })
        } else {
            try await harness.produce(generated.events.map(\.record))
        }
        let password = setup == "wrong-credentials" ? "not-the-password" : Self.proxySentinel
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "proxy-\(setup)",
            "--signer", "token-service", "--token-url", peers.baseURL + TokenServiceEmulator.path, "--provider", harness.key.projectId,
            "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000", "--fleet-engine-url", harness.emulatorURL,
            "--metrics-port", String(metricsPort), "--log-format", "text",
        ] + (input == "avro" ? ["--schema-registry", peers.baseURL] : []),
            environment: ["HTTPS_PROXY": "http://relay:\(password)@127.0.0.1:\(proxy.port)", "NO_PROXY": "metadata.google.internal"])
        relay.watchLog()
        var metrics = ""
        if setup == "credentials" {
            try await harness.waitUntilEverythingIsDelivered(generated, group: "proxy-\(setup)")
            let targets = Set(proxy.tunnels)
            #expect(targets == ["127.0.0.1:\(peers.port)", harness.emulatorURL.split(separator: "/").last.map(String.init) ?? ""],
                    "tunnels to the signer's and registry's host and to Fleet Engine: \(targets)")
            if input == "avro" { #expect(registry.statistics.lookupsById >= 1, "the schema was fetched through the tunnel") }
        } else if input == "avro" {
            try await eventually("the log says the registry cannot be reached through the proxy", timeout: .seconds(60)) {
                relay.log.split(separator: "\n").contains { $0.contains("Schema Registry") && $0.contains("proxy refused the tunnel") }
            }
            #expect(proxy.refusals >= 1 && proxy.tunnels.isEmpty)
            #expect(registry.statistics.lookupsById == 0 && harness.emulator.statistics.requests == 0, "nothing got past the proxy")
            #expect(try await harness.committedOffsets(group: "proxy-\(setup)").values.allSatisfy { $0 == nil }, "records wait uncommitted")
        } else {
            var readiness = ""
            let failing = { (body: String, check: String) in
                (try? JSONParser.parse(Array(body.utf8)))?["checks"]?[check]?["ok"] == .bool(false)
            }
            do {
                try await eventually("/readyz answers 503 for the signer", timeout: .seconds(90)) {
                    guard let answer = try? await httpGet("http://127.0.0.1:\(metricsPort)/readyz") else { return false }
                    readiness = answer.body
                    return answer.status == 503 && failing(answer.body, "signer")
                }
            } catch {
                Issue.record("\(error): \(readiness)")
            }
            #expect(readiness.contains("proxy"), "\(readiness)")
            #expect(proxy.refusals >= 1 && proxy.tunnels.isEmpty)
            #expect(harness.emulator.statistics.requests == 0 && tokenService.statistics.requests == 0, "nothing got past the proxy")
            #expect(relay.log.contains("the HTTPS proxy refused the tunnel"), "the log says the proxy refused")
        }
        metrics = (try? await httpGet("http://127.0.0.1:\(metricsPort)/metrics").body) ?? ""
        let readinessNow = (try? await httpGet("http://127.0.0.1:\(metricsPort)/readyz").body) ?? ""
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "\(result.stderrExcerpt(2000))")
        #expect(!metrics.isEmpty)
        for (name, text) in [("log", relay.log + result.stderr), ("output", result.stdout), ("metrics", metrics), ("readiness", readinessNow)] {
            #expect(!text.contains(Self.proxySentinel), "the proxy password is in the \(name)")
        }
        await proxy.shutdown()
        await peers.shutdown()
        await harness.shutdown()
    }
}
