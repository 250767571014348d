import FleetAuth
import FleetEngine
import Foundation
import Kafka
import Relay
import Testing

/// The pipeline core under routine production events: rebalances while fetching
/// is paused, a vehicle Fleet Engine keeps refusing, long histories. Each test
/// reads the outcome from independent observers: the emulator's fix history and
/// offsets committed as a second Kafka client sees them.
extension IntegrationTests {
    @Suite struct PipelineCoreTests {
        /// The relay paused fetching during an outage, then the group rebalanced twice
        /// (a member joined and left). Once the outage ends the relay must fetch again:
        /// librdkafka keeps an application pause on a partition across assignments.
        @Test(arguments: [nil, "cooperative-sticky"])
        func fetchingResumesAfterRebalancesDuringAnOutage(assignor: String?) async throws {
            let (harness, generated) = try await RelayHarness.withBacklog(partitions: 4, vehicles: 400, fixesPerVehicle: 10)
            harness.emulator.goDown(for: .seconds(3600))
            func configure(_ configuration: inout RelayConfiguration) {
                configuration.maximumPendingRecords = 400
                configuration.batchSize = 100
                configuration.shutdownTimeout = .seconds(2)
                if let assignor { configuration.kafka["partition.assignment.strategy"] = assignor }
            }
            let first = try harness.startRelay(group: "relay", configure: configure)
            try await eventually("fetching pauses during the outage") { first.relay.isPaused }

            let second = try harness.startRelay(group: "relay", configure: configure)
            try await eventually("the joining member is assigned partitions", timeout: .seconds(240)) {
                !second.relay.assignedPartitions.isEmpty && first.relay.assignedPartitions.count < 4
            }
            try await second.stop()
            try await eventually("the first member owns every partition again", timeout: .seconds(240)) {
                first.relay.assignedPartitions.count == 4
            }

            harness.emulator.goDown(for: .zero)
            try await harness.waitUntilEverythingIsDelivered(generated, group: "relay")
            try await first.stop()
            #expect(harness.backwardsUpdates == 0)
            #expect(first.relay.statistics.snapshot.deadLettered == 0)
            await harness.shutdown()
        }

        /// Fleet Engine answers one vehicle 503 for as long as the test runs. Every other
        /// vehicle, on every partition, keeps flowing; only the stuck vehicle's partition
        /// holds its commit, at the stuck vehicle's first record.
        @Test func aVehicleStuckInRetriesHoldsOnlyItsOwnPartitionsCommit() async throws {
            let harness = try await RelayHarness(partitions: 4)
            let stuckVehicle = "veh-7"
            harness.emulator.faultPlan = .init(unavailableVehicles: [stuckVehicle])
            let before = GeneratedEvents(vehicles: 200, fixesPerVehicle: 10)
            try await harness.produce(before.events.map(\.record))
            let keyPath = harness.writeKeyFile()
            let metricsPort = try freeLoopbackPort()
            let relay = try IntegrationTests.CommandLineTests.RunningProcess([
                "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "relay",
                "--key-file", keyPath, "--fleet-engine-url", harness.emulatorURL, "--max-in-flight", "8",
                "--max-pending-records", "400", "--batch-size", "100", "--batch-linger-ms", "20",
                "--retry-initial-ms", "10", "--retry-max-ms", "200",
                "--kafka-property", "session.timeout.ms=6000", "--metrics-port", "\(metricsPort)", "--metrics-host", "127.0.0.1",
            ])
            let others = before.events.filter { $0.vehicle != stuckVehicle }
            try await eventually("every other vehicle's fixes arrive") { harness.lostEvents(others).isEmpty }

            // Newer fixes produced while the vehicle is stuck flow as well.
            let after = GeneratedEvents(vehicles: 200, fixesPerVehicle: 10, startingAfter: before)
            try await harness.produce(after.events.map(\.record))
            let othersAfter = after.events.filter { $0.vehicle != stuckVehicle }
            try await eventually("every other vehicle's newer fixes arrive", timeout: .seconds(180)) {
                harness.lostEvents(othersAfter).isEmpty
            }

            // Where the stuck vehicle's first record sits, as a second client reads the topic.
            let records = try await harness.read(topic: harness.topic, count: before.events.count + after.events.count)
            let stuckRecord = try #require(records.filter { $0.key == Array(stuckVehicle.utf8) }.min { $0.offset < $1.offset })
            let end = try await harness.endOffsets()
            try await eventually("other partitions commit to their end; the stuck one holds at its stuck record") {
                let committed = try await harness.committedOffsets(group: "relay")
                return (0..<Int32(4)).allSatisfy { partition in
                    partition == stuckRecord.partition
                        ? (committed[partition] ?? nil) ?? 0 == stuckRecord.offset
                        : committed[partition] == .some(end[partition])
                }
            }
            let gauge = "fleet_relay_oldest_unfinished_seconds{topic=\"\(harness.topic)\",partition=\"\(stuckRecord.partition)\"}"
            let firstAge = try await metricValue(gauge, port: metricsPort)
            try await eventually("the oldest unfinished record's age grows") {
                try await metricValue(gauge, port: metricsPort) > firstAge
            }
            #expect(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: stuckVehicle)) == nil)
            relay.process.terminate()
            #expect(await relay.finish().status == 0)
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }

        /// A backlog of one vehicle longer than the past-locations cap goes out as
        /// several requests, oldest first: every fix arrives, none out of order.
        @Test func aHistoryLongerThanThePastLocationsCapArrivesWholeAndInOrder() async throws {
            let harness = try await RelayHarness(partitions: 1)
            let generated = GeneratedEvents(vehicles: 1, fixesPerVehicle: 300)
            try await harness.produce(generated.events.map(\.record))

            let running = try harness.startRelay(group: "relay") { $0.pastLocationsLimit = 100 }
            try await eventually("every record is finished") { running.relay.statistics.snapshot.finished == 300 }
            try await eventually("offsets are committed to the end") { try await harness.committedToTheEnd(group: "relay") }
            try await running.stop()

            #expect(harness.lostEvents(generated.events).isEmpty, "\(harness.lostEvents(generated.events).count) fixes lost")
            let vehicle = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-0")))
            #expect(vehicle.fixesOutOfOrder == 0)
            #expect(vehicle.updates >= 3, "at most 101 fixes per request")
            #expect(vehicle.locationTimeMilliseconds == generated.events.last?.recordedAt)
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }
    }
}

/// The value of one series on a relay's `/metrics`, e.g. `name{label="x"}`; throws when absent.
func metricValue(_ series: String, port: Int) async throws -> Double {
    let body = try await httpGet("http://127.0.0.1:\(port)/metrics").body
    for line in body.split(separator: "\n") where line.hasPrefix(series + " ") {
        if let value = Double(line.dropFirst(series.count + 1)) { return value }
    }
    let name = series.prefix { $0 != "{" }
    let similar = body.split(separator: "\n").filter { $0.hasPrefix(name) }.joined(separator: "; ")
    throw FixtureError(message: "no series \(series) on /metrics (\(name) series: \(similar))")
}
