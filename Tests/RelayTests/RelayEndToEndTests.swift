import FleetAuth
import FleetEngine
import FleetModel
import Foundation
import JSON
import Kafka
import Relay
import Testing

/// Tests against real peers (librdkafka's mock cluster, the emulator, the binary).
/// Serialized, nested suites included: each runs a cluster, consumer groups and HTTP traffic.
/// Two such chains run side by side (this and `PipelineIntegrationTests`): their tests mostly
/// wait on their peers (a rebalance, a backoff, an outage), so one chain leaves a core idle.
@Suite(.serialized) enum IntegrationTests {}

/// The second chain of tests against real peers: the pipeline core, operator controls, quotas.
@Suite(.serialized) enum PipelineIntegrationTests {}

/// The relay against real peers: librdkafka's mock cluster and the emulator.
extension PipelineIntegrationTests {
@Suite struct RelayEndToEndTests {
    @Test func deliversEveryVehiclesNewestFixAndCommitsToTheEnd() async throws {
        let harness = try await RelayHarness(partitions: 4)
        let generated = GeneratedEvents(vehicles: 200, fixesPerVehicle: 50)
        #expect(generated.events.count == 10_000)
        try await harness.produce(generated.events.map(\.record))
        let newest = generated.newest

        let first = try harness.startRelay(group: "relay")
        try await eventually("every record is finished") { first.relay.statistics.snapshot.finished == 10_000 }
        try await eventually("the emulator holds every vehicle's newest fix") {
            newest.allSatisfy { id, event in
                harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: id))?.locationTimeMilliseconds == event.recordedAt
            }
        }
        try await first.stop()

        let totals = first.relay.statistics.snapshot
        #expect(totals.consumed == 10_000)
        #expect(totals.accepted + totals.superseded == 10_000)
        #expect(totals.deadLettered == 0)
        #expect(totals.stale == 0)
        let vehicles = harness.emulator.vehicles
        #expect(vehicles.count == 200)
        #expect(vehicles.values.allSatisfy { $0.backwardsUpdates == 0 })
        for (id, event) in newest {
            let stored = try #require(vehicles[VehicleIdentity(kind: .vehicle, id: id)])
            let point = stored.lastLocation["supplementalLocation"]
            #expect(point?["latitude"]?.numberValue == event.latitude)
            #expect(point?["longitude"]?.numberValue == event.longitude)
        }
        // Coalescing: far fewer requests than events, yet every fix reached Fleet Engine,
        // each exactly once and in its vehicle's order.
        #expect(harness.lostEvents(generated.events).count == 0, "fixes lost")
        #expect(harness.duplicateFixes == 0)
        #expect(harness.fixesOutOfOrder == 0)
        #expect(totals.requestsAccepted < 10_000)

        let end = try await harness.endOffsets()
        let committed = try await harness.committedOffsets(group: "relay")
        for partition in 0..<Int32(4) {
            #expect(committed[partition] == .some(end[partition]), "partition \(partition)")
        }

        // A second run in the same group starts at the committed offsets: it forwards
        // only a record produced after it joined.
        let updatesBefore = harness.emulator.statistics.updateRequests
        let second = try harness.startRelay(group: "relay")
        try await eventually("the second relay owns every partition") { second.relay.assignedPartitions.count == 4 }
        let sentinel = GeneratedEvents(vehicles: 1, fixesPerVehicle: 1, prefix: "sentinel-")
        try await harness.produce(sentinel.events.map(\.record))
        try await eventually("the sentinel arrives") {
            harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "sentinel-0")) != nil
        }
        try await eventually("the sentinel is finished") { second.relay.statistics.snapshot.finished == 1 }
        try await second.stop()
        #expect(second.relay.statistics.snapshot.consumed == 1)
        #expect(harness.emulator.statistics.updateRequests == updatesBefore + 1)
        await harness.shutdown()
    }

    @Test func deadLettersEveryBadRecordWithItsReasonAndDeliversEveryGoodOne() async throws {
        let harness = try await RelayHarness(partitions: 4)
        let bad = try Fixtures.bad
        let good = try Fixtures.good
        let generated = GeneratedEvents(vehicles: 50, fixesPerVehicle: 20)
        var records = generated.events.prefix(1000 - bad.count - good.count).map(\.record)
        let generatedCount = records.count
        // Spread the contract's samples through the stream.
        for (index, sample) in (bad.map { ($0.key, $0.value) } + good.map { ($0.key, $0.value) }).enumerated() {
            records.insert((sample.0, sample.1), at: min(records.count, index * 29))
        }
        #expect(records.count == 1000)
        try await harness.produce(records)

        let running = try harness.startRelay(group: "relay")
        try await eventually("every record is finished") { running.relay.statistics.snapshot.finished == 1000 }
        try await running.stop()

        let totals = running.relay.statistics.snapshot
        #expect(totals.deadLettered == bad.count)
        #expect(totals.accepted + totals.superseded + totals.stale == generatedCount + good.count)

        let letters = try await harness.readDeadLetters(count: bad.count)
        #expect(letters.count == bad.count)
        var expected = Dictionary(grouping: bad, by: { $0.value }).mapValues { $0.map(\.reason) }
        for letter in letters {
            let reason = try #require(letter.header("fleet-relay-error"))
            #expect(expected[letter.value]?.first == reason, "dead letter with reason \(reason)")
            expected[letter.value]?.removeFirst()
            #expect(!(letter.header("fleet-relay-detail") ?? "").isEmpty)
            let source = try #require(letter.header("fleet-relay-source"))
            #expect(source.hasPrefix(harness.topic + "/"))
            #expect(source.split(separator: "/").count == 3)
        }
        #expect(expected.values.allSatisfy { $0.isEmpty }, "every bad record was dead-lettered exactly once")

        let sentGenerated = Array(generated.events.prefix(generatedCount))
        #expect(harness.lostEvents(sentGenerated).count == 0, "fixes lost")
        for (id, event) in generated.newest where generated.events.prefix(generatedCount).contains(where: { $0.vehicle == id }) {
            let lastSent = generated.events.prefix(generatedCount).filter { $0.vehicle == id }.map(\.recordedAt).max()
            #expect(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: id))?.locationTimeMilliseconds == lastSent,
                    "vehicle \(id) (newest generated \(event.recordedAt))")
        }
        for id in ["veh-00001", "veh-00002", "veh-00003", "veh-00004", "veh-00006", "Fahrzeug-ü"] {
            #expect(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: id)) != nil, "sample \(id)")
        }
        #expect(harness.emulator.vehicle(VehicleIdentity(kind: .deliveryVehicle, id: "veh-00005")) != nil)

        let end = try await harness.endOffsets()
        let committed = try await harness.committedOffsets(group: "relay")
        #expect((0..<Int32(4)).allSatisfy { committed[$0] == .some(end[$0]) })
        await harness.shutdown()
    }

    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func retriesTransientFailuresAndLosesNothing(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 2)
        harness.emulator.injectFaults(.init(status: 503, retryAfter: "0"), count: 15)
        harness.emulator.injectFaults(.init(status: 429), count: 5)
        let generated = GeneratedEvents(vehicles: 20, fixesPerVehicle: 10)
        try await harness.produce(generated.events.map(\.record))

        let running = try harness.startRelay(group: "relay", wireProtocol: wireProtocol)
        try await eventually("every record is finished") { running.relay.statistics.snapshot.finished == 200 }
        try await running.stop()
        let totals = running.relay.statistics.snapshot
        #expect(totals.deadLettered == 0)
        #expect(totals.retries >= 20)
        #expect(harness.emulator.statistics.updateResponsesByStatus[503] == 15)
        #expect(harness.lostEvents(generated.events).count == 0, "fixes lost")
        #expect(harness.fixesOutOfOrder == 0)
        for (id, event) in generated.newest {
            #expect(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: id))?.locationTimeMilliseconds == event.recordedAt)
        }
        #expect(harness.emulator.vehicles.values.allSatisfy { $0.backwardsUpdates == 0 })
        harness.expectServed(over: wireProtocol)
        await harness.shutdown()
    }

    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func tokensFleetEngineRefusesAreRetriedOnceThenDeadLettered(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 1)
        let strangerKey = try ServiceAccountKey.parse(Array(ServiceAccountKey.generateKeyFileJSON(
            projectId: harness.key.projectId, clientEmail: harness.key.clientEmail,
            privateKeyId: harness.key.privateKeyId)!.utf8), source: "stranger")
        let generated = GeneratedEvents(vehicles: 3, fixesPerVehicle: 2)
        try await harness.produce(generated.events.map(\.record))

        let running = try harness.startRelay(group: "relay", signingKey: strangerKey, wireProtocol: wireProtocol)
        try await eventually("every record is finished") { running.relay.statistics.snapshot.finished == 6 }
        try await running.stop()
        #expect(running.relay.statistics.snapshot.deadLettered == 6)
        // Each vehicle's request was tried twice: once, and once more with a fresh token.
        #expect(harness.emulator.statistics.updateResponsesByStatus[401] == 6)
        let letters = try await harness.readDeadLetters(count: 6)
        #expect(letters.map { $0.header("fleet-relay-error") } == Array(repeating: "unauthenticated", count: 6))
        let end = try await harness.endOffsets()
        let committed = try await harness.committedOffsets(group: "relay")
        #expect(committed[0] == .some(end[0]))
        harness.expectServed(over: wireProtocol)
        await harness.shutdown()
    }

    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func fixesOlderThanFleetEnginesLiveLocationAreNeverSent(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 1)
        let generated = GeneratedEvents(vehicles: 5, fixesPerVehicle: 4)
        // Fleet Engine already holds a newer fix of every vehicle, as after a previous owner or a restart.
        let client = FleetEngineClient(configuration: .init(baseURL: harness.emulatorURL, provider: harness.key.projectId,
                                                            wireProtocol: wireProtocol, egress: try harness.egress()))
        let signer = LocalKeySigner(key: harness.key)
        for (id, event) in generated.newest {
            let vehicle = VehicleIdentity(kind: .vehicle, id: id)
            let newer = LocationFix(latitude: 1, longitude: 1, recordedAtMilliseconds: event.recordedAt + 1000)
            let token = try await signer.mint(for: vehicle).token
            #expect(await client.send(VehicleLocationUpdate(vehicle: vehicle, lastLocation: newer), token: token).status == 200)
        }
        await client.shutdown()
        try await harness.produce(generated.events.map(\.record))

        let running = try harness.startRelay(group: "relay", wireProtocol: wireProtocol)
        try await eventually("every record is finished") { running.relay.statistics.snapshot.finished == 20 }
        try await running.stop()
        #expect(running.relay.statistics.snapshot.stale == 20)
        #expect(harness.emulator.statistics.updateRequests == 5, "only the five seeding updates")
        #expect(harness.backwardsUpdates == 0)
        #expect(try await harness.committedToTheEnd(group: "relay"))
        harness.expectServed(over: wireProtocol)
        await harness.shutdown()
    }
}
}
