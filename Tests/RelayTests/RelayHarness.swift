import Egress
import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import HTTPServing
import Kafka
import KafkaTesting
import Logging
import Relay
import ServiceLifecycle
import Synchronization
import Testing

/// A mock Kafka cluster, an in-process Fleet Engine emulator and a key: the
/// real peers the relay talks to, on loopback.
final class RelayHarness: Sendable {
    let cluster: KafkaMockCluster
    let topic: String
    let partitions: Int
    let key: ServiceAccountKey
    let emulator: FleetEngineEmulator
    let emulatorURL: String
    /// The throwaway CA and certificate of an emulator serving HTTPS.
    let tls: ThrowawayTLS?
    let logger: Logger

    static let keyFileJSON = ServiceAccountKey.generateKeyFileJSON(
        projectId: "harness-project", clientEmail: "relay@harness-project.iam.gserviceaccount.com",
        privateKeyId: "harness-kid")!
    static let sharedKey = try! ServiceAccountKey.parse(Array(keyFileJSON.utf8), source: "harness key")

    /// The harness's key as a key file, for the command line.
    func writeKeyFile() -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString).json").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(Self.keyFileJSON.utf8), attributes: [.posixPermissions: 0o600])
        return path
    }

    /// - Parameter https: serve the emulator over HTTPS (ALPN h2 and http/1.1) with a
    ///   throwaway CA that the relays `startRelay` starts trust: the production path, by
    ///   default; relay processes get the CA with `--ca-file caFile`.
    /// - Parameter certificateNames: the names the emulator's certificate is issued for, when
    ///   not `localhost` and the loopback addresses.
    init(partitions: Int = 4, requireExistingVehicles: Bool = false, https: Bool = true,
         http2: HTTP2ServerBehaviour = .init(), certificateNames: [String]? = nil, offersHTTP2: Bool = true) async throws {
        // Every fix time the emulator receives is kept, so tests can prove nothing was lost.
        var logger = Logger(label: "relay-test")
        logger.logLevel = ProcessInfo.processInfo.environment["FLEET_RELAY_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .error
        self.logger = logger
        self.cluster = try KafkaMockCluster(brokers: 3, logger: logger)
        self.topic = "locations-\(UUID().uuidString.prefix(8))"
        self.partitions = partitions
        try cluster.createTopic(topic, partitions: partitions)
        try cluster.createTopic(topic + ".dlq", partitions: 1)
        self.key = Self.sharedKey
        self.emulator = FleetEngineEmulator(key: key, provider: key.projectId, requireExistingVehicles: requireExistingVehicles,
                                            recordsHistory: true)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("harness-tls-\(UUID().uuidString)").path
        let tls = !https ? nil
            : try certificateNames.map { try ThrowawayTLS.generate(in: directory, issuedFor: $0) } ?? ThrowawayTLS.generate(in: directory)
        self.tls = tls
        let serverTLS = try tls?.serverTLS()
        self.emulatorURL = try await emulator.start(options: .init(tls: offersHTTP2 ? serverTLS : serverTLS?.withoutHTTP2(), http2: http2))
    }

    /// The emulator's CA, for a relay process's `--ca-file` (HTTPS, the default).
    var caFile: String { tls?.caFile ?? "" }

    /// How relays reach the emulator: trusting its CA when it serves HTTPS.
    func egress(httpVersion: Egress.HTTPVersion = .automatic, proxy: EgressProxy = .none) throws -> Egress {
        try Egress.load(caFiles: tls.map { [$0.caFile] } ?? [], httpVersion: httpVersion, proxy: proxy)
    }

    /// A short session timeout: the mock cluster lets a new member wait that long
    /// for members that left before it completes a rebalance.
    var kafka: KafkaConfiguration {
        KafkaConfiguration(bootstrapServers: cluster.bootstrapServers,
                           extra: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500"].merging(
                            ProcessInfo.processInfo.environment["FLEET_RELAY_TEST_KAFKA_DEBUG"].map { ["debug": $0] } ?? [:]) { $1 })
    }

    func produce(_ records: [(key: [UInt8]?, value: [UInt8])]) async throws {
        let (flushed, failed) = try await KafkaProducer.run(configuration: kafka, logger: logger) { producer in
            for record in records { try await producer.enqueue(topic: topic, key: record.key, value: record.value) }
            return (await producer.flush(timeout: .seconds(60)), producer.failedDeliveries)
        }
        guard flushed, failed == 0 else { throw FixtureError(message: "produce failed: \(failed) undelivered") }
    }

    /// Ten vehicles' fixes with, at offset 5 of a one-partition topic, a record that has no
    /// fix (dead-lettered as `missing_field`).
    func produceTenFixesWithABadRecordAtOffsetFive() async throws {
        var records = GeneratedEvents(vehicles: 10, fixesPerVehicle: 1).events.map(\.record)
        records.insert((Array("veh-0".utf8), Array("{\"vehicle_id\": \"veh-0\"}".utf8)), at: 5)
        try await produce(records)
    }

    /// A relay running under a ServiceGroup, as the command line runs it.
    struct RunningRelay: Sendable {
        let relay: RelayService
        let group: ServiceGroup
        let task: Task<Void, any Error>
        let client: FleetEngineClient

        /// Graceful shutdown (what SIGTERM does), then waits for the relay to stop.
        func stop() async throws {
            await group.triggerGracefulShutdown()
            try await task.value
            await client.shutdown()
        }

        /// `stop()`, bounded: false when the relay still ran `limit` after graceful shutdown began.
        /// It is then cancelled and left behind, so that the test ends and says so even when the
        /// relay never ends (a task group would wait for it).
        func stop(within limit: Duration) async -> Bool {
            await group.triggerGracefulShutdown()
            let ended = EndedFlag()
            let relayTask = task
            Task { _ = try? await relayTask.value; ended.set() }
            guard (try? await eventually("the relay stopped", timeout: limit) { ended.isSet }) != nil else {
                task.cancel()
                return false
            }
            await client.shutdown()
            return true
        }
    }

    func startRelay(group: String, signingKey: ServiceAccountKey? = nil, signer: (any VehicleTokenSigner)? = nil,
                    tokens: TokenCache? = nil, requestTimeout: Duration = .seconds(15), egress: Egress? = nil,
                    wireProtocol: FleetEngineProtocol = .rest, logger: Logger? = nil,
                    configure: (inout RelayConfiguration) -> Void = { _ in }) throws -> RunningRelay {
        var configuration = RelayConfiguration(kafka: kafka, topic: topic, group: group,
                                               retryPolicy: RetryPolicy(initialDelay: .milliseconds(10), maximumDelay: .milliseconds(200)))
        configure(&configuration)
        let client = FleetEngineClient(configuration: .init(baseURL: emulatorURL, provider: key.projectId, wireProtocol: wireProtocol,
                                                            requestTimeout: requestTimeout, egress: try egress ?? self.egress()))
        let logger = logger ?? self.logger
        let relay = RelayService(configuration: configuration, client: client,
                                     tokens: tokens ?? TokenCache(signer: signer ?? LocalKeySigner(key: signingKey ?? key)),
                                     logger: logger)
        let serviceGroup = ServiceGroup(services: [relay], logger: logger)
        let task = Task { try await serviceGroup.run() }
        return RunningRelay(relay: relay, group: serviceGroup, task: task, client: client)
    }

    /// Every Fleet Engine request the emulator served came over `wireProtocol`, and there were
    /// some: a test run for gRPC cannot pass over REST.
    func expectServed(over wireProtocol: FleetEngineProtocol, sourceLocation: SourceLocation = #_sourceLocation) {
        Self.expectServed(by: emulator, over: wireProtocol, sourceLocation: sourceLocation)
    }

    static func expectServed(by emulator: FleetEngineEmulator, over wireProtocol: FleetEngineProtocol,
                             sourceLocation: SourceLocation = #_sourceLocation) {
        let statistics = emulator.statistics
        #expect(statistics.requests > 0, "the emulator served nothing", sourceLocation: sourceLocation)
        #expect(statistics.grpcCalls == (wireProtocol == .grpc ? statistics.requests : 0),
                "\(statistics.grpcCalls) gRPC calls of \(statistics.requests) requests over \(wireProtocol)", sourceLocation: sourceLocation)
    }

    func committedOffsets(group: String) async throws -> [Int32: Int64?] {
        try await KafkaInspector(configuration: kafka, group: group, logger: logger)
            .committedOffsets(topic: topic, partitions: partitions)
    }

    func endOffsets() async throws -> [Int32: Int64] {
        try await KafkaInspector(configuration: kafka, group: "inspector", logger: logger)
            .highWatermarks(topic: topic, partitions: partitions)
    }

    /// Reads the dead-letter topic from the start until `count` records arrived.
    func readDeadLetters(count: Int) async throws -> [KafkaRecord] {
        try await read(topic: topic + ".dlq", count: count)
    }

    /// Reads a topic from the start, in a throwaway group, until `count` records arrived.
    func read(topic: String, count: Int) async throws -> [KafkaRecord] {
        var configuration = kafka
        configuration["group.id"] = "reader-\(UUID().uuidString.prefix(8))"
        let consumer = try KafkaConsumer(configuration: configuration, topics: [topic], logger: logger)
        return await withTaskGroup(of: [KafkaRecord]?.self) { group in
            group.addTask { try? await consumer.run(); return nil }
            group.addTask {
                var collected: [KafkaRecord] = []
                for await chunk in consumer.records {
                    collected += chunk
                    if collected.count >= count { break }
                }
                return collected
            }
            group.addTask { try? await Task.sleep(for: .seconds(90)); return [] }
            var records: [KafkaRecord] = []
            while let next = await group.next() {
                guard let next else { continue }
                records = next
                break
            }
            await consumer.close()
            group.cancelAll()
            return records
        }
    }

    /// The partition each vehicle's records went to (read back from the topic, by key).
    func partitionOfEachVehicle(records count: Int) async throws -> [String: Int32] {
        let records = try await read(topic: topic, count: count)
        guard records.count >= count else { throw FixtureError(message: "read \(records.count) of \(count) records") }
        return records.reduce(into: [:]) { partitions, record in
            partitions[String(decoding: record.key ?? [], as: UTF8.self)] = record.partition
        }
    }

    /// Events whose fix never reached the emulator (neither as last nor as past location).
    func lostEvents(_ events: [GeneratedEvents.Event]) -> [GeneratedEvents.Event] {
        let vehicles = emulator.vehicles
        return events.filter { event in
            !(vehicles[VehicleIdentity(kind: .vehicle, id: event.vehicle)]?.receivedFixTimes.contains(event.recordedAt) ?? false)
        }
    }

    /// Fixes received more than once (at-least-once redelivery after a crash or rebalance).
    var duplicateFixes: Int {
        emulator.statistics.locationsReceived - emulator.vehicles.values.reduce(0) { $0 + $1.receivedFixTimes.count }
    }

    /// Fixes that reached the emulator after a newer fix of their vehicle had.
    var fixesOutOfOrder: Int { emulator.vehicles.values.reduce(0) { $0 + $1.fixesOutOfOrder } }

    /// Accepted updates that moved a vehicle back in time.
    var backwardsUpdates: Int { emulator.vehicles.values.reduce(0) { $0 + $1.backwardsUpdates } }

    func committedToTheEnd(group: String) async throws -> Bool {
        let end = try await endOffsets()
        let committed = try await committedOffsets(group: group)
        // A partition that never held a record has nothing to commit.
        return (0..<Int32(partitions)).allSatisfy { committed[$0] == .some(end[$0]) || end[$0] == 0 }
    }

    /// A harness whose topic already holds a backlog of generated events.
    static func withBacklog(partitions: Int, vehicles: Int, fixesPerVehicle: Int,
                            latency: Duration = .zero) async throws -> (RelayHarness, GeneratedEvents) {
        let harness = try await RelayHarness(partitions: partitions)
        harness.emulator.faultPlan = .init(latency: latency)
        let generated = GeneratedEvents(vehicles: vehicles, fixesPerVehicle: fixesPerVehicle)
        try await harness.produce(generated.events.map(\.record))
        return (harness, generated)
    }

    /// Waits until every event's fix reached the emulator and the group committed to the end.
    func waitUntilEverythingIsDelivered(_ generated: GeneratedEvents, group: String) async throws {
        try await eventually("every event reached the emulator", timeout: .seconds(300)) {
            lostEvents(generated.events).isEmpty
        }
        try await eventually("offsets are committed to the end", timeout: .seconds(120)) {
            try await committedToTheEnd(group: group)
        }
    }

    func shutdown() async {
        await emulator.shutdown()
        if let tls { try? FileManager.default.removeItem(atPath: tls.directory) }
    }
}

/// The result of `call`, or nil when it was not answered within `limit` (it is then left
/// running: a test fails instead of hanging on a call that is never answered).
func answered<Value: Sendable>(within limit: Duration, _ call: @escaping @Sendable () async -> Value) async -> Value? {
    let answer = FirstAnswer<Value>()
    return await withCheckedContinuation { continuation in
        answer.waiter.withLock { $0 = continuation }
        Task { answer.give(await call()) }
        Task { try? await Task.sleep(for: limit); answer.give(nil) }
    }
}

/// Whichever of two racing calls answers first resumes the waiter; the other finds it gone.
private final class FirstAnswer<Value: Sendable>: Sendable {
    let waiter = Mutex<CheckedContinuation<Value?, Never>?>(nil)

    func give(_ value: Value?) {
        waiter.withLock { $0.take() }?.resume(returning: value)
    }
}

/// Waits until `condition` holds, checking every 50 ms, for at most `timeout`
/// (generous: shared CI machines are slow). Throws when it never holds.
func eventually(_ what: String, timeout: Duration = .seconds(120),
                _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw FixtureError(message: "timed out waiting until \(what)")
}

/// Location events with increasing times: `fixesPerVehicle` per vehicle, interleaved.
struct GeneratedEvents {
    struct Event {
        let vehicle: String
        let latitude: Double
        let longitude: Double
        let recordedAt: Int64
        var json: String {
            "{\"vehicle_id\":\"\(vehicle)\",\"lat\":\(latitude),\"lng\":\(longitude),\"recorded_at\":\"\(RFC3339.format(milliseconds: recordedAt))\",\"speed_mps\":8.5}"
        }
        var record: (key: [UInt8]?, value: [UInt8]) { (Array(vehicle.utf8), Array(json.utf8)) }
    }

    let events: [Event]

    init(events: [Event]) {
        self.events = events
    }

    /// - Parameter startingAfter: earlier events these follow in time (every fix newer than theirs).
    init(vehicles: Int, fixesPerVehicle: Int, prefix: String = "veh-", startingAfter earlier: GeneratedEvents? = nil) {
        let start = earlier.flatMap { $0.events.map(\.recordedAt).max().map { $0 + 1000 } }
            ?? Int64(Date().timeIntervalSince1970 * 1000) - Int64(fixesPerVehicle) * 1000 - Int64(vehicles) - 60_000
        var events: [Event] = []
        for step in 0..<fixesPerVehicle {
            for index in 0..<vehicles {
                events.append(Event(vehicle: "\(prefix)\(index)", latitude: 37 + Double(step) / 1000,
                                    longitude: -122 - Double(index % 50_000) / 1000, recordedAt: start + Int64(step) * 1000 + Int64(index)))
            }
        }
        self.events = events
    }

    /// Each vehicle's newest event.
    var newest: [String: Event] {
        events.reduce(into: [:]) { newest, event in
            if (newest[event.vehicle]?.recordedAt ?? .min) < event.recordedAt { newest[event.vehicle] = event }
        }
    }
}

/// Set once, read from any task.
final class EndedFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
