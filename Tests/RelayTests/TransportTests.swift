import Egress
import FleetAuth
import FleetEngine
import FleetEngineEmulator
import Foundation
import HTTPServing
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

    @Test func goAwaysAndStreamResetsLoseNothingAndStrandNoRequest() async throws {
        let harness = try await RelayHarness(partitions: 4, https: true,
                                             http2: .init(goAwayEveryRequests: 500, resetShare: 0.01))
        defer { Task { await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 500, fixesPerVehicle: 12)
        try await harness.produce(generated.events.map(\.record))
        // One fix per request, so that the run crosses several GOAWAYs.
        let relay = try harness.startRelay(group: "goaway", requestTimeout: .seconds(10)) { configuration in
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
        #expect(statistics.retries <= transport.streamsReset,
                "only reset streams were retried: a stream above a GOAWAY's last one goes out again at once, on a new connection")
    }

    @Test func anUntrustedCertificateSendsNothingAndSaysWhyUntilTheRightCAIsGiven() async throws {
        let harness = try await RelayHarness(partitions: 2, https: true)
        defer { Task { await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 10, fixesPerVehicle: 2)
        try await harness.produce(generated.events.map(\.record))
        let logs = CapturedLogs()
        // The system's trust store only: the emulator's throwaway CA is not in it.
        let untrusting = try harness.startRelay(group: "tls", egress: try Egress.load(caFiles: []), logger: logs.logger) { configuration in
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
        let trusting = try harness.startRelay(group: "tls")
        try await harness.waitUntilEverythingIsDelivered(generated, group: "tls")
        try await trusting.stop()
        #expect(harness.lostEvents(generated.events).count == 0)
    }

    @Test func httpsProxyFromTheEnvironmentCarriesTheTraffic() async throws {
        let (tunnels, emulatorURL) = try await tunnelsWhileDelivering(
            environment: { ["HTTPS_PROXY": $0, "NO_PROXY": "metadata.google.internal,.svc.cluster.local"] })
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
    private func tunnelsWhileDelivering(environment: (String) -> [String: String]) async throws -> ([String], String) {
        let harness = try await RelayHarness(partitions: 2, https: true)
        let proxy = try await ConnectProxy.start()
        defer { Task { await proxy.shutdown(); await harness.shutdown() } }
        let generated = GeneratedEvents(vehicles: 20, fixesPerVehicle: 3)
        try await harness.produce(generated.events.map(\.record))
        let egress = try harness.egress(proxy: try EgressProxy.from(environment: environment(proxy.url)))
        let relay = try harness.startRelay(group: "proxy", egress: egress)
        try await harness.waitUntilEverythingIsDelivered(generated, group: "proxy")
        try await relay.stop()
        #expect(harness.lostEvents(generated.events).count == 0)
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
