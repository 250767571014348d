import FleetEngine
import FleetModel
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import JSON
import Testing

/// Flags and signals an operator relies on, through the binary: how fixes are written
/// (`--location-mode`), how often one vehicle is updated (`--min-interval-per-vehicle`),
/// and how a shutdown ends work that does not finish (`--shutdown-timeout`, a second signal).
extension PipelineIntegrationTests {
    @Suite struct OperatorControlTests {
        typealias RunningProcess = IntegrationTests.CommandLineTests.RunningProcess

        static func relay(_ harness: RelayHarness, keyPath: String, extra: [String]) throws -> RunningProcess {
            try IntegrationTests.RelayFaultTests.relayProcess(harness, keyPath: keyPath, extra: extra)
        }

        /// Twenty vehicles' fixes, Fleet Engine holding every update for ten minutes, and a relay
        /// (four requests in flight) started with `extra` and waited for until all four hang.
        static func relayWithHangingUpdates(extra: [String]) async throws
            -> (harness: RelayHarness, keyPath: String, generated: GeneratedEvents, relay: RunningProcess) {
            let harness = try await RelayHarness(partitions: 2)
            let keyPath = harness.writeKeyFile()
            let generated = GeneratedEvents(vehicles: 20, fixesPerVehicle: 1)
            try await harness.produce(generated.events.map(\.record))
            harness.emulator.faultPlan = .init(updateLatency: .seconds(600))
            let relay = try Self.relay(harness, keyPath: keyPath, extra: extra)
            try await eventually("updates hang at Fleet Engine") { harness.emulator.openUpdates == 4 }
            return (harness, keyPath, generated, relay)
        }

        /// SIGTERM to a relay run with `--shutdown-timeout 3s` and `--request-timeout 60` while
        /// its updates hang: it exits 0, saying so, within the shutdown timeout rather than the
        /// request timeout. Returns how long it took.
        @discardableResult
        static func expectEndedByTheShutdownTimeout(_ relay: RunningProcess) async -> Duration {
            let signalled = ContinuousClock.now
            relay.process.terminate()
            let result = await relay.finish()
            let shutdownTime = ContinuousClock.now - signalled
            #expect(result.status == 0, "stderr: \(result.stderr.suffix(1500))")
            #expect(result.stderr.contains("Shutdown timeout reached: abandoning unfinished work"))
            #expect(shutdownTime < .seconds(30), "ended by the 3 s shutdown timeout, not the 60 s request timeout")
            return shutdownTime
        }

        /// Nothing finished, so a second client sees nothing committed.
        static func expectNothingCommitted(_ harness: RelayHarness) async throws {
            let committed = try await harness.committedOffsets(group: "cli")
            #expect(committed.values.allSatisfy { ($0 ?? 0) == 0 }, "nothing finished, nothing committed: \(committed)")
        }

        /// A member joins while the first one's updates hang at Fleet Engine for 30 s: the first
        /// one's revoke waits for them before its partitions move, and that wait shows in its
        /// `fleet_relay_revoke_wait_seconds` histogram.
        @Test func aRevokesWaitForTheWorkUnderWayIsAHistogram() async throws {
            let harness = try await RelayHarness(partitions: 2)
            let keyPath = harness.writeKeyFile()
            // 8 vehicles on both partitions, all sent at once and held for 30 s: far longer than the
            // group takes to rebalance, so the revoke begins while they still hang. (Updates that
            // hang one after another would leave the revoke a wait anywhere between 0 and one hang.)
            try await harness.produce(GeneratedEvents(vehicles: 8, fixesPerVehicle: 1).events.map(\.record))
            harness.emulator.faultPlan = .init(updateLatency: .seconds(30))
            func member(metricsPort: Int) throws -> RunningProcess {
                try RunningProcess([
                    "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "revoke",
                    "--key-file", keyPath, "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile,
                    "--max-in-flight", "8", "--request-timeout", "45", "--kafka-property", "session.timeout.ms=6000",
                    "--metrics-port", "\(metricsPort)", "--metrics-host", "127.0.0.1",
                ])
            }
            let port = try freeLoopbackPort()
            let first = try member(metricsPort: port)
            try await eventually("updates hang at Fleet Engine") { harness.emulator.openUpdates == 8 }
            let second = try member(metricsPort: try freeLoopbackPort())
            var metrics = ""
            try await eventually("the first member's revoke is counted", timeout: .seconds(240)) {
                metrics = try await httpGet("http://127.0.0.1:\(port)/metrics").body
                return (metricValue(metrics, "fleet_relay_revoke_wait_seconds_count", [:]) ?? 0) >= 1
            }
            let waited = metricValue(metrics, "fleet_relay_revoke_wait_seconds_sum", [:]) ?? 0
            #expect(waited >= 0.5, "the revoke waited \(waited) s for updates that hang 30 s")
            #expect(waited < 50, "at most --revoke-drain-timeout (--request-timeout + 5 s): \(waited) s")
            for member in [first, second] {
                member.process.terminate()
                #expect(await member.finish().status == 0)
            }
            #expect(harness.backwardsUpdates == 0)
            await harness.shutdown()
        }

        /// `--location-mode device`: the fix is the vehicle's own location (`location`,
        /// `updateTime`, `locationSensor`, `latlngAccuracy`), with no supplemental fields.
        @Test func deviceLocationModeSendsEachFixAsTheVehiclesOwnLocation() async throws {
            let harness = try await RelayHarness(partitions: 2)
            let keyPath = harness.writeKeyFile()
            let start = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
            let sensors: [(event: String?, fleetEngine: String?)] = [
                ("GPS", "GPS"), ("NETWORK", "NETWORK"), ("FUSED", "FUSED_LOCATION_PROVIDER"), (nil, nil),
            ]
            struct Sent { let latitude: Double, longitude: Double, time: Int64, sensor: String?, accuracy: Double }
            var sent: [String: Sent] = [:]
            var records: [(key: [UInt8]?, value: [UInt8])] = []
            for index in 0..<20 {
                let vehicle = "veh-\(index)"
                let fix = Sent(latitude: 37.5 + Double(index) / 100, longitude: -122.25 - Double(index) / 100,
                               time: start + Int64(index), sensor: sensors[index % 4].fleetEngine, accuracy: Double(index) + 0.5)
                sent[vehicle] = fix
                let sensorField = sensors[index % 4].event.map { ",\"sensor\":\"\($0)\"" } ?? ""
                let json = "{\"vehicle_id\":\"\(vehicle)\",\"lat\":\(fix.latitude),\"lng\":\(fix.longitude),"
                    + "\"recorded_at\":\(fix.time),\"accuracy_m\":\(fix.accuracy)\(sensorField)}"
                records.append((Array(vehicle.utf8), Array(json.utf8)))
            }
            try await harness.produce(records)

            let relay = try Self.relay(harness, keyPath: keyPath, extra: ["--location-mode", "device"])
            try await eventually("every vehicle's fix reached the emulator") {
                sent.allSatisfy { harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: $0.key))?.locationTimeMilliseconds == $0.value.time }
            }
            for (vehicle, fix) in sent {
                let location = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: vehicle))?.lastLocation)
                #expect(location["location"]?["latitude"]?.numberValue == fix.latitude, "\(vehicle)")
                #expect(location["location"]?["longitude"]?.numberValue == fix.longitude, "\(vehicle)")
                #expect(location["updateTime"]?.stringValue == RFC3339.format(milliseconds: fix.time), "\(vehicle)")
                #expect(location["locationSensor"]?.stringValue == fix.sensor, "\(vehicle)")
                #expect(location["latlngAccuracy"]?.numberValue == fix.accuracy, "\(vehicle)")
                let supplemental = location.objectValue?.keys.filter { $0.hasPrefix("supplementalLocation") } ?? []
                #expect(supplemental.isEmpty, "\(vehicle) carries \(supplemental)")
            }
            relay.process.terminate()
            #expect(await relay.finish().status == 0)
            await harness.shutdown()
        }

        /// `--min-interval-per-vehicle 2s` while each vehicle reports four times a second:
        /// its updates reach Fleet Engine at least the interval apart, from the first on (which
        /// also mints a token and reads the live location first, and so arrives late against
        /// its start), the fixes between them travel as past locations, and none is lost.
        @Test func aMinimumIntervalPerVehicleSpacesItsRequestsAndLosesNoFix() async throws {
            let harness = try await RelayHarness(partitions: 2)
            let keyPath = harness.writeKeyFile()
            let relay = try Self.relay(harness, keyPath: keyPath, extra: ["--min-interval-per-vehicle", "2s"])

            let start = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
            let producing = ContinuousClock.now
            var produced: [GeneratedEvents.Event] = []
            for round in 0..<24 {
                let events = (0..<5).map { index in
                    GeneratedEvents.Event(vehicle: "veh-\(index)", latitude: 37 + Double(round) / 1000, longitude: -122,
                                          recordedAt: start + Int64(round) * 250 + Int64(index))
                }
                try await harness.produce(events.map(\.record))
                produced += events
                try await Task.sleep(for: .milliseconds(250))  // the fleet's reporting pace, not a wait for the relay
            }
            let producedOver = ContinuousClock.now - producing
            try await eventually("every fix reached the emulator") { harness.lostEvents(produced).isEmpty }
            // One request per 2 s while fixes come in, and one for the last: the 24 fixes of each vehicle
            // arrive over 6 s, or longer when producing is slow.
            let allowed = Int(producedOver / .seconds(2)) + 2

            for index in 0..<5 {
                let vehicle = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-\(index)")))
                let times = vehicle.acceptedUpdateTimes
                let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
                #expect(!gaps.isEmpty && gaps.allSatisfy { $0 >= .milliseconds(1900) }, "veh-\(index): requests \(gaps) apart")
                #expect(times.count <= allowed && times.count < 24, "veh-\(index): \(times.count) requests for 24 fixes produced over \(producedOver)")
            }
            relay.process.terminate()
            #expect(await relay.finish().status == 0)
            print("operator figures: 5 vehicles × 24 fixes 250 ms apart, 2 s interval: \(harness.emulator.statistics.updateRequests) requests")
            await harness.shutdown()
        }

        /// Fleet Engine holds every update for ten minutes. SIGTERM with `--shutdown-timeout 3s`
        /// ends the relay long before its 60 s request timeout, with exit 0 and nothing committed
        /// for the abandoned records; a restarted relay then delivers every one of them.
        @Test func theShutdownTimeoutAbandonsRequestsThatDoNotEndAndLeavesThemUncommitted() async throws {
            let (harness, keyPath, generated, relay) = try await Self.relayWithHangingUpdates(
                extra: ["--shutdown-timeout", "3s", "--request-timeout", "60"])
            let shutdownTime = await Self.expectEndedByTheShutdownTimeout(relay)
            try await Self.expectNothingCommitted(harness)

            harness.emulator.faultPlan = .init()
            let restarted = try Self.relay(harness, keyPath: keyPath, extra: [])
            try await harness.waitUntilEverythingIsDelivered(generated, group: "cli")
            restarted.process.terminate()
            #expect(await restarted.finish().status == 0)
            print("operator figures: shutdown with 4 requests hanging took \(shutdownTime)")
            await harness.shutdown()
        }

        /// The same for updates a worker's slot starts on its event loop, without the worker's
        /// task: each vehicle's second fix, its token cached and its live location read with its
        /// first. The shutdown timeout cancels them there; exit 0, nothing of the second fixes
        /// committed, and a restarted relay delivers them.
        @Test func theShutdownTimeoutAbandonsUpdatesStartedOnTheEventLoop() async throws {
            let harness = try await RelayHarness(partitions: 2)
            let keyPath = harness.writeKeyFile()
            let first = GeneratedEvents(vehicles: 20, fixesPerVehicle: 1)
            try await harness.produce(first.events.map(\.record))
            let relay = try Self.relay(harness, keyPath: keyPath, extra: ["--shutdown-timeout", "3s", "--request-timeout", "60"])
            try await harness.waitUntilEverythingIsDelivered(first, group: "cli")
            let committedAfterFirst = try await harness.committedOffsets(group: "cli")

            harness.emulator.faultPlan = .init(updateLatency: .seconds(600))
            let second = GeneratedEvents(vehicles: 20, fixesPerVehicle: 1, startingAfter: first)
            try await harness.produce(second.events.map(\.record))
            try await eventually("updates hang at Fleet Engine") { harness.emulator.openUpdates == 4 }
            await Self.expectEndedByTheShutdownTimeout(relay)
            #expect(try await harness.committedOffsets(group: "cli") == committedAfterFirst, "nothing of the second fixes committed")

            harness.emulator.faultPlan = .init()
            let restarted = try Self.relay(harness, keyPath: keyPath, extra: [])
            try await harness.waitUntilEverythingIsDelivered(GeneratedEvents(events: first.events + second.events), group: "cli")
            restarted.process.terminate()
            #expect(await restarted.finish().status == 0)
            await harness.shutdown()
        }

        /// The first SIGTERM starts a graceful shutdown that would wait up to five minutes for
        /// hanging updates; the second one ends the process at once with 128 + 15.
        @Test func aSecondSignalExitsAtOnce() async throws {
            let (harness, _, _, relay) = try await Self.relayWithHangingUpdates(
                extra: ["--shutdown-timeout", "300s", "--request-timeout", "300"])
            relay.watchLog()
            relay.process.terminate()
            try await eventually("the graceful shutdown began") { relay.log.contains("Shutting down") }
            let secondSignal = ContinuousClock.now
            kill(relay.process.processIdentifier, SIGTERM)
            let result = await relay.finish()
            let exitTime = ContinuousClock.now - secondSignal
            #expect(result.status == 128 + SIGTERM)
            #expect(exitTime < .seconds(60), "exited at once, not after the 300 s shutdown timeout")
            #expect((relay.log + result.stderr).contains("Second signal: exiting without finishing in-flight work"))
            try await Self.expectNothingCommitted(harness)
            print("operator figures: second signal to exit took \(exitTime)")
            await harness.shutdown()
        }
    }
}
