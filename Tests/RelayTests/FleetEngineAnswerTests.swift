import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import Kafka
import Relay
import Synchronization
import Testing

/// How the running relay treats each kind of Fleet Engine answer, seen at the emulator and in
/// the dead-letter topic read back by a second client.
extension IntegrationTests.RelayFaultTests {
    /// Reads the dead letters and checks that each carries `reason` and that every record is finished.
    @discardableResult
    static func expectDeadLettered(_ harness: RelayHarness, count: Int, reason: String,
                                   group: String) async throws -> [KafkaRecord] {
        let letters = try await harness.readDeadLetters(count: count)
        #expect(letters.count == count)
        #expect(letters.allSatisfy { $0.header("fleet-relay-error") == reason },
                "\(letters.map { $0.header("fleet-relay-error") ?? "none" })")
        try await eventually("offsets are committed to the end") { try await harness.committedToTheEnd(group: group) }
        return letters
    }

    /// 403: the token is minted again once; refused again, the records are dead-lettered.
    @Test func a403IsRetriedWithANewTokenOnceThenDeadLettered() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let signer = OtherVehicleSigner(base: LocalKeySigner(key: harness.key))
        let running = try harness.startRelay(group: "relay", signer: signer)
        let generated = GeneratedEvents(vehicles: 3, fixesPerVehicle: 1)
        try await harness.produce(generated.events.map(\.record))
        let letters = try await Self.expectDeadLettered(harness, count: 3, reason: "permission_denied", group: "relay")
        try await running.stop()
        // Each letter is its record unchanged, key included, though a waiting fix keeps its key only as its vehicle id.
        #expect(Set(letters.map { [$0.key ?? [], $0.value] }) == Set(generated.events.map { [$0.record.key ?? [], $0.record.value] }))
        #expect(harness.emulator.statistics.updateResponsesByStatus[403] == 6, "two attempts per vehicle")
        #expect(signer.mints.load(ordering: .relaxed) == 6, "a new token for the second attempt")
        #expect(harness.emulator.vehicles.isEmpty)
        await harness.shutdown()
    }

    /// 404: the vehicle does not exist in Fleet Engine; its records are dead-lettered, others flow.
    @Test func a404DeadLettersOnlyThatVehiclesRecords() async throws {
        let harness = try await RelayHarness(partitions: 1)
        harness.emulator.faultPlan.rejectedVehicles = ["veh-1"]
        let running = try harness.startRelay(group: "relay")
        let generated = GeneratedEvents(vehicles: 4, fixesPerVehicle: 1)
        try await harness.produce(generated.events.map(\.record))
        try await Self.expectDeadLettered(harness, count: 1, reason: "vehicle_not_found", group: "relay")
        try await running.stop()
        #expect(harness.lostEvents(generated.events).map(\.vehicle) == ["veh-1"])
        await harness.shutdown()
    }

    /// A 429's Retry-After is waited out even though the retry policy's own backoff is far shorter.
    @Test func retryAfterIsHonoured() async throws {
        let harness = try await RelayHarness(partitions: 1)
        harness.emulator.injectFaults(.init(status: 429, retryAfter: "2"), count: 1)
        let running = try harness.startRelay(group: "relay")  // backoff 10–200 ms
        let generated = GeneratedEvents(vehicles: 1, fixesPerVehicle: 1)
        try await harness.produce(generated.events.map(\.record))
        try await eventually("the fix arrived") { harness.lostEvents(generated.events).isEmpty }
        try await running.stop()
        let statistics = harness.emulator.statistics
        #expect(statistics.updateResponsesByStatus == [429: 1, 200: 1])
        let waited = try #require(statistics.lastUpdateAt) - (try #require(statistics.firstUpdateAt))
        #expect(waited >= .seconds(2), "the retry came \(waited) after the 429")
        await harness.shutdown()
    }

    /// A vehicle that keeps failing past --retry-deadline is dead-lettered with that reason;
    /// the partition's commit then moves on.
    @Test func aVehicleFailingPastTheRetryDeadlineIsDeadLettered() async throws {
        let harness = try await RelayHarness(partitions: 1)
        harness.emulator.faultPlan.unavailableVehicles = ["veh-2"]
        let running = try harness.startRelay(group: "relay") { $0.retryDeadline = .seconds(1) }
        let generated = GeneratedEvents(vehicles: 4, fixesPerVehicle: 2)
        try await harness.produce(generated.events.map(\.record))
        try await Self.expectDeadLettered(harness, count: 2, reason: "retry_deadline_exceeded", group: "relay")
        try await running.stop()
        let letters = try await harness.readDeadLetters(count: 2)
        #expect(letters.allSatisfy { $0.key == Array("veh-2".utf8) })
        #expect(harness.lostEvents(generated.events).allSatisfy { $0.vehicle == "veh-2" })
        #expect((harness.emulator.statistics.updateResponsesByStatus[503] ?? 0) >= 2, "retried before giving up")
        await harness.shutdown()
    }
}

/// Mints valid tokens for the wrong vehicle: Fleet Engine answers 403.
final class OtherVehicleSigner: VehicleTokenSigner {
    let name = "other-vehicle"
    let base: LocalKeySigner
    let mints = Atomic<Int>(0)

    init(base: LocalKeySigner) {
        self.base = base
    }

    func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
        mints.add(1, ordering: .relaxed)
        return try await base.mint(for: VehicleIdentity(kind: vehicle.kind, id: vehicle.id + "-other"))
    }
}
