import Egress
import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import HTTPServing
import Synchronization
import Testing

/// The Fleet Engine client over HTTPS on its own HTTP/2 transport, observed at the
/// emulator: what the server counted per protocol and connection, and what it stored.
@Suite(.serialized) struct HTTP2TransportTests {
    let fix = LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: 1_795_381_200_000)

    struct Served {
        let emulator: FleetEngineEmulator
        let url: String
        let tls: ThrowawayTLS
    }

    func withHTTPSEmulator(http2: HTTP2ServerBehaviour = .init(), withoutHTTP2: Bool = false,
                           _ body: (Served) async throws -> Void) async throws {
        let tls = try ThrowawayTLS.generate(in: FileManager.default.temporaryDirectory
            .appendingPathComponent("transport-tls-\(UUID().uuidString)").path)
        let emulator = FleetEngineEmulator(key: EmulatorTokenCheckTests.key, provider: "emu-project")
        let serverTLS = try tls.serverTLS()
        let url = try await emulator.start(options: .init(tls: withoutHTTP2 ? serverTLS.withoutHTTP2() : serverTLS, http2: http2))
        do {
            try await body(Served(emulator: emulator, url: url, tls: tls))
        } catch {
            await emulator.shutdown(); throw error
        }
        await emulator.shutdown()
    }

    func client(_ served: Served, httpVersion: Egress.HTTPVersion = .automatic, maximumInFlight: Int = 64,
                requestTimeout: Duration = .seconds(15), liveness: HTTP2Liveness = .init(),
                wireProtocol: FleetEngineProtocol = .rest) throws -> FleetEngineClient {
        FleetEngineClient(configuration: .init(
            baseURL: served.url, provider: "emu-project", wireProtocol: wireProtocol, requestTimeout: requestTimeout,
            maximumInFlight: maximumInFlight,
            liveness: liveness, egress: try Egress.load(caFiles: [served.tls.caFile], httpVersion: httpVersion)))
    }

    /// Sends one update per vehicle, all at once; their outcomes.
    func sendAtOnce(_ client: FleetEngineClient, vehicles: Range<Int>) async -> [FleetEngineOutcome] {
        await withTaskGroup(of: FleetEngineOutcome.self) { group in
            for vehicle in vehicles {
                group.addTask { await client.send(update("veh-\(vehicle)"), token: token("veh-\(vehicle)")).outcome }
            }
            return await group.reduce(into: [FleetEngineOutcome]()) { $0.append($1) }
        }
    }

    func token(_ id: String = "veh-1") -> String {
        let checks = EmulatorTokenCheckTests()
        return checks.token(checks.claims(id: id))
    }

    func update(_ id: String = "veh-1", at milliseconds: Int64 = 1_795_381_200_000) -> VehicleLocationUpdate {
        VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: id),
                              lastLocation: LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: milliseconds))
    }

    @Test func answersErrorsAndReadsTravelAsStreamsOfOneConnection() async throws {
        try await withHTTPSEmulator { served in
            let client = try client(served)
            #expect(await client.send(update(), token: token()).outcome == .accepted)
            served.emulator.injectFaults(.init(status: 503, retryAfter: "3"), count: 1)
            let refused = await client.send(update(at: 1_795_381_201_000), token: token())
            #expect(refused.outcome == .transient(cause: .status(503), retryAfterSeconds: 3), "status and Retry-After read from HPACK")
            #expect(!refused.message.isEmpty, "the error body's message")
            let fetched = await client.fetchVehicle(VehicleIdentity(kind: .vehicle, id: "veh-1"), token: token())
            #expect(fetched.status == 200)
            #expect(fetched.locationMilliseconds == 1_795_381_200_000, "the time read from the GET's body")
            await client.shutdown()

            let stored = try #require(served.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-1")))
            #expect(stored.locationTimeMilliseconds == 1_795_381_200_000)
            let transport = try #require(served.emulator.transportStatistics)
            #expect(transport.http2Requests == 3)
            #expect(transport.http1Requests == 0)
            #expect(transport.connections == 1, "every request a stream of one connection")
        }
    }

    @Test func moreRequestsThanTheServersStreamLimitWaitForStreamsAndAllArrive() async throws {
        try await withHTTPSEmulator(http2: .init(maximumConcurrentStreams: 4)) { served in
            served.emulator.faultPlan.updateLatency = .milliseconds(50)
            let client = try client(served, maximumInFlight: 4)
            let outcomes = await withTaskGroup(of: FleetEngineOutcome.self) { group in
                for vehicle in 0..<40 {
                    group.addTask { await client.send(update("veh-\(vehicle)"), token: token("veh-\(vehicle)")).outcome }
                }
                return await group.reduce(into: [FleetEngineOutcome]()) { $0.append($1) }
            }
            await client.shutdown()
            #expect(outcomes.allSatisfy { $0 == .accepted }, "\(outcomes.filter { $0 != .accepted })")
            #expect(served.emulator.vehicles.count == 40)
            // Beyond the stream limit requests wait for streams: no connections beyond the pool's.
            #expect(served.emulator.transportStatistics?.connections == client.http2ConnectionCount)
        }
    }

    /// Bodies larger than the server lets a stream send at once, together more than the
    /// connection's window: each goes in pieces as the server's WINDOW_UPDATEs allow, and every
    /// fix of every body arrives.
    @Test func bodiesBeyondTheServersWindowsGoInPiecesAndArriveWhole() async throws {
        try await withHTTPSEmulator(http2: .init(streamWindow: 1_000)) { served in
            let client = try client(served)
            let vehicles = 24
            let outcomes = await withTaskGroup(of: FleetEngineOutcome.self) { group in
                for vehicle in 0..<vehicles {
                    let id = "veh-\(vehicle)"
                    let past = (0..<100).map { step in
                        LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: 1_795_381_100_000 + Int64(step) * 1000)
                    }
                    let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: id), lastLocation: fix,
                                                       pastLocations: past)
                    group.addTask { await client.send(update, token: token(id)).outcome }
                }
                return await group.reduce(into: [FleetEngineOutcome]()) { $0.append($1) }
            }
            await client.shutdown()
            #expect(outcomes.allSatisfy { $0 == .accepted }, "\(outcomes.filter { $0 != .accepted })")
            for vehicle in 0..<vehicles {
                let stored = try #require(served.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-\(vehicle)")))
                #expect(stored.locationTimeMilliseconds == fix.recordedAtMilliseconds)
                #expect(stored.pastLocationsReceived == 100, "every past fix of veh-\(vehicle)'s body")
            }
        }
    }

    /// A server announcing 8 streams gets 64 requests on 8 connections, not 64 on the two
    /// connections a limit of 100 would need, with 48 of them waiting for a stream.
    @Test func theServersStreamLimitDecidesHowManyConnectionsOpen() async throws {
        try await withHTTPSEmulator(http2: .init(maximumConcurrentStreams: 8)) { served in
            let client = try client(served, maximumInFlight: 64)
            #expect(await client.send(update("veh-first"), token: token("veh-first")).outcome == .accepted, "learns the limit")
            served.emulator.faultPlan.updateLatency = .milliseconds(500)
            let outcomes = await sendAtOnce(client, vehicles: 0..<64)
            #expect(outcomes.allSatisfy { $0 == .accepted }, "\(outcomes.filter { $0 != .accepted })")
            let transport = try #require(served.emulator.transportStatistics)
            #expect(transport.mostOpenStreams <= 8)
            #expect(transport.connections == 8, "64 requests over streams of 8: \(transport.connections) connections")
            #expect(client.http2ConnectionCount == transport.connections)
            await client.shutdown()
        }
    }

    /// The server announces 100 streams, then after each connection's first request lowers its
    /// limit to 2: the pool follows the new SETTINGS and spreads the requests over more connections.
    @Test func aStreamLimitLoweredMidConnectionIsFollowed() async throws {
        try await withHTTPSEmulator(http2: .init(maximumConcurrentStreams: 100, streamLimitChange: (afterRequests: 1, limit: 2))) { served in
            let client = try client(served, maximumInFlight: 16)
            // The new SETTINGS precede the answer on the connection: known once it is read.
            #expect(await client.send(update("veh-first"), token: token("veh-first")).outcome == .accepted)
            served.emulator.faultPlan.updateLatency = .milliseconds(500)
            let outcomes = await sendAtOnce(client, vehicles: 0..<16)
            #expect(outcomes.allSatisfy { $0 == .accepted }, "\(outcomes.filter { $0 != .accepted })")
            let transport = try #require(served.emulator.transportStatistics)
            #expect(transport.connections == 8, "16 requests over streams of 2: \(transport.connections) connections")
            await client.shutdown()
        }
    }

    /// A path that drops the connection without a word: the request on it fails once the PING
    /// goes unanswered, long before its 60 s timeout, and the next one takes a new connection.
    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func aConnectionThatGoesSilentIsClosedWhenItsPingIsNotAnswered(over wireProtocol: FleetEngineProtocol) async throws {
        try await withHTTPSEmulator { served in
            let liveness = HTTP2Liveness(pingAfterSilence: .milliseconds(300), pingTimeout: .milliseconds(700), idleTimeout: .seconds(60))
            let client = try client(served, maximumInFlight: 1, requestTimeout: .seconds(60), liveness: liveness, wireProtocol: wireProtocol)
            #expect(await client.send(update(), token: token()).outcome == .accepted)
            served.emulator.path.silenceOpenConnections()
            let started = ContinuousClock.now
            let lost = await client.send(update(at: 1_795_381_201_000), token: token())
            let waited = ContinuousClock.now - started
            #expect(lost.outcome == .transient(cause: .transport(.connection), retryAfterSeconds: nil), "\(lost.message)")
            #expect(lost.message.contains("PING"), "\(lost.message)")
            #expect(waited < .seconds(20), "ended by the unanswered PING (about 1 s), not the request timeout: \(waited)")

            #expect(await client.send(update(at: 1_795_381_202_000), token: token()).outcome == .accepted)
            await client.shutdown()
            #expect(served.emulator.transportStatistics?.connections == 2, "the next request on a new connection")
            #expect(served.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-1"))?.locationTimeMilliseconds == 1_795_381_202_000)
            #expect(served.emulator.statistics.grpcCalls == (wireProtocol == .grpc ? served.emulator.statistics.requests : 0))
        }
    }

    /// Answered PINGs keep nothing alive past the idle timeout: the connection closes, and the
    /// next request opens a new one.
    @Test func aConnectionIdlePastItsLimitIsClosed() async throws {
        try await withHTTPSEmulator { served in
            let liveness = HTTP2Liveness(pingAfterSilence: .milliseconds(100), pingTimeout: .seconds(5), idleTimeout: .seconds(1))
            let client = try client(served, maximumInFlight: 1, liveness: liveness)
            #expect(await client.send(update(), token: token()).outcome == .accepted)
            try await eventually("the idle connection was closed") { served.emulator.transportStatistics?.connectionsClosed == 1 }
            #expect(await client.send(update(at: 1_795_381_201_000), token: token()).outcome == .accepted)
            #expect(served.emulator.transportStatistics?.connections == 2)
            await client.shutdown()
        }
    }

    @Test func aStreamPastItsTimeoutIsResetAndTheConnectionCarriesOn() async throws {
        try await withHTTPSEmulator { served in
            // Long enough for an answer on a machine busy with other suites; far below the server's 30 s.
            let client = try client(served, requestTimeout: .seconds(2))
            served.emulator.faultPlan.updateLatency = .seconds(30)
            let started = ContinuousClock.now
            let late = await client.send(update(), token: token())
            #expect(late.outcome == .transient(cause: .transport(.timeout), retryAfterSeconds: nil), "\(late.message)")
            #expect(ContinuousClock.now - started < .seconds(20), "ended by the request timeout, not the server")

            served.emulator.faultPlan.updateLatency = .zero
            let next = await client.send(update(at: 1_795_381_201_000), token: token())
            #expect(next.outcome == .accepted, "\(next.message)")
            await client.shutdown()
            #expect(served.emulator.transportStatistics?.connections == 1, "a timeout resets the stream, not the connection")
        }
    }

    @Test func cancellingTheCallerEndsTheRequestAndResetsItsStream() async throws {
        try await withHTTPSEmulator { served in
            // Neither the server nor the request timeout would end it within the test's deadline.
            served.emulator.faultPlan.updateLatency = .seconds(120)
            let client = try client(served, requestTimeout: .seconds(120))
            let returned = Atomic(false)
            let sending = Task {
                defer { returned.store(true, ordering: .releasing) }
                return await client.send(update(), token: token())
            }
            try await eventually("the update reached the emulator") { served.emulator.openUpdates == 1 }
            sending.cancel()
            try await eventually("the cancelled send returned") { returned.load(ordering: .acquiring) }
            let response = await sending.value
            #expect(response.status == 0, "ended without an answer")
            try await eventually("the server saw the stream reset") { served.emulator.openUpdates == 0 }

            served.emulator.faultPlan.updateLatency = .zero
            let next = await client.send(update(at: 1_795_381_201_000), token: token())
            #expect(next.outcome == .accepted, "\(next.message)")
            await client.shutdown()
            #expect(served.emulator.transportStatistics?.connections == 1, "the connection carried on")
            #expect(served.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-1"))?.locationTimeMilliseconds
                == 1_795_381_201_000)
        }
    }

    @Test func aServerWithoutHTTP2GetsHTTP1OnAutoAndIsNamedOnTwo() async throws {
        try await withHTTPSEmulator(withoutHTTP2: true) { served in
            let required = try client(served, httpVersion: .http2)
            let refused = await required.send(update(), token: token())
            await required.shutdown()
            #expect(refused.outcome == .transient(cause: .transport(.httpVersion), retryAfterSeconds: nil))
            #expect(refused.message.contains("ALPN") && refused.message.contains("--http-version 2"), "\(refused.message)")
            #expect(served.emulator.statistics.updateRequests == 0, "nothing sent over a protocol the operator ruled out")

            let automatic = try client(served)
            #expect(await automatic.send(update(), token: token()).outcome == .accepted)
            #expect(await automatic.send(update(at: 1_795_381_201_000), token: token()).outcome == .accepted)
            await automatic.shutdown()
            let transport = try #require(served.emulator.transportStatistics)
            #expect(transport.http1Requests == 2)
            #expect(transport.http2Requests == 0)
        }
    }
}

/// Waits until `condition` holds, checking every 20 ms, for at most `seconds`.
func eventually(_ what: String, within seconds: Int = 20, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("not within \(seconds) s: \(what)")
            return
        }
        try await Task.sleep(for: .milliseconds(20))
    }
}
