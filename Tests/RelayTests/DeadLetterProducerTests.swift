import FleetModel
import Foundation
import Testing

/// The dead-letter producer is a librdkafka client of its own, whose main thread wakes a few
/// times a second even when idle: the relay builds it when the first letter comes.
extension IntegrationTests {
@Suite struct DeadLetterProducerTests {
    @Test func theDeadLetterProducerIsBuiltOnlyWhenTheFirstLetterComes() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let generated = GeneratedEvents(vehicles: 5, fixesPerVehicle: 2)
        try await harness.produce(generated.events.map(\.record))
        let relay = try CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "letters-later",
            "--key-file", harness.writeKeyFile(), "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile,
            "--log-level", "info",
        ], environment: ["FLEET_RELAY_COMMIT_INTERVAL_MS": "200"])
        let process = relay.process.processIdentifier

        try await eventually("every vehicle's newest fix reached the emulator") {
            generated.newest.allSatisfy { id, event in
                harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: id))?.locationTimeMilliseconds == event.recordedAt
            }
        }
        try await eventually("every record is committed") { try await harness.committedToTheEnd(group: "letters-later") }
        #expect(Self.librdkafkaClients(in: process) == 1, "the consumer alone, with nothing to dead-letter")

        try await harness.produce([(Array("veh-0".utf8), Array(#"{"vehicle_id": "veh-0", "lat": 95}"#.utf8))])
        let letters = try await harness.readDeadLetters(count: 1)
        #expect(letters.first?.header("fleet-relay-error") == "missing_field")
        try await eventually("the letter's record is committed") { try await harness.committedToTheEnd(group: "letters-later") }
        #expect(Self.librdkafkaClients(in: process) == 2, "the consumer and the dead-letter producer")

        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "stderr: \(result.stderr.suffix(2000))")
        await harness.shutdown()
    }

    /// librdkafka names each client's main thread `rdk:main`.
    static func librdkafkaClients(in process: Int32) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/task")) ?? []
        return tasks.count { task in
            (try? String(contentsOfFile: "/proc/\(process)/task/\(task)/comm", encoding: .utf8)) == "rdk:main\n"
        }
    }
}
}
