import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import HTTPServing
import InputFormats
import JSON
import Kafka
import Relay
import Testing

/// Records serialized by Confluent's own Python serializers (an encoder independent of the
/// relay) against the emulator's Schema Registry stand-in, relayed with `--schema-registry`:
/// the emulator receives exactly the fixes they carry; records the registry cannot explain
/// are dead-lettered with their reason; a registry outage delays records, never loses them.
@Suite(.serialized) struct SchemaRegistryTests {
    struct Fix {
        let vehicle: String
        let latitude: Double
        let longitude: Double
        let milliseconds: Int64
        let speed: Double
        let heading: Int

        var json: String {
            #"{"vehicle_id":"\#(vehicle)","lat":\#(latitude),"lng":\#(longitude),"recorded_at_ms":\#(milliseconds),"speed_mps":\#(speed),"heading":\#(heading)}"#
        }
    }

    static func fixes(prefix: String, vehicles: Int) -> [Fix] {
        var fixes: [Fix] = []
        for vehicle in 0..<vehicles {
            for index in 0..<2 {
                let milliseconds = 1_795_381_200_000 + Int64(vehicle * 1000 + index * 500 + 7)
                fixes.append(Fix(vehicle: "\(prefix)-\(vehicle)", latitude: 52.5 + Double(vehicle) * 0.01 + Double(index) * 0.001,
                                 longitude: 13.4 + Double(vehicle) * 0.01, milliseconds: milliseconds,
                                 speed: 8.25 + Double(index), heading: (vehicle * 45 + index) % 360))
            }
        }
        return fixes
    }

    static let typedMapping = """
        fields:
          vehicle_id: vehicle_id
          lat: position.lat
          lng: position.lng
          recorded_at: recorded_at      # Avro timestamp-micros, Protobuf Timestamp: epoch milliseconds once decoded
          altitude_m: position.altitude
          speed_mps: speed_mps
          heading: heading
          sensor: sensor
        """

    /// The Python interpreter of the test virtualenv (`make test` creates it).
    static var python: String {
        get throws {
            let path = ProcessInfo.processInfo.environment["FLEET_RELAY_TEST_PYTHON"]
                ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                    .appendingPathComponent(".build/test-venv/bin/python3").path
            guard FileManager.default.isExecutableFile(atPath: path) else {
                throw FixtureError(message: "no Python with confluent-kafka at \(path): run `make test`, which installs it")
            }
            return path
        }
    }

    /// Confluent's serializer's output for each fix, registering the schema as it does.
    static func serialize(_ fixes: [Fix], kind: String, registry: String, topic: String) throws -> [[UInt8]] {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/serialize.py").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try python)
        process.arguments = [script, registry, topic, kind]
        let input = Pipe(), output = Pipe(), errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        input.fileHandleForWriting.write(Data(fixes.map(\.json).joined(separator: "\n").utf8))
        try input.fileHandleForWriting.close()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaints = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FixtureError(message: "serialize.py failed: \(String(decoding: complaints, as: UTF8.self))")
        }
        // A line that is not base64 (a peer that printed something else) fails the test that
        // asked, not the whole test process.
        return try String(decoding: printed, as: UTF8.self).split(separator: "\n").map { line in
            guard let value = Data(base64Encoded: String(line)) else {
                throw FixtureError(message: "serialize.py printed a line that is not base64: \(line.prefix(200))")
            }
            return Array(value)
        }
    }

    struct Setup {
        let harness: RelayHarness
        let registry: SchemaRegistryEmulator
        let server: HTTPServer

        var source: SchemaRegistryClient { SchemaRegistryClient(baseURL: server.baseURL, credentials: nil, egress: .standard) }

        /// The fixes as Confluent's `kind` serializer writes them (registering its schema here).
        func serialize(_ fixes: [Fix], kind: String) throws -> [[UInt8]] {
            try SchemaRegistryTests.serialize(fixes, kind: kind, registry: server.baseURL, topic: harness.topic)
        }

        /// Produces `values`, each keyed by its fix's vehicle.
        func produce(_ fixes: [Fix], _ values: [[UInt8]]) async throws {
            try await harness.produce(zip(fixes, values).map { (Array($0.vehicle.utf8), $1) })
        }

        /// A relay reading framed values through this registry with `mapping` (nil: the native one).
        func startRelay(group: String, mapping: String?,
                        configure: (inout RelayConfiguration) -> Void = { _ in }) throws -> RelayHarness.RunningRelay {
            let inputMapping = try mapping.map { try MappingFile.parse($0, name: group) }
            let source = self.source
            return try harness.startRelay(group: group) {
                $0.inputMapping = inputMapping
                $0.schemaSource = source
                configure(&$0)
            }
        }
    }

    func withRegistry(_ body: (Setup) async throws -> Void) async throws {
        let harness = try await RelayHarness(partitions: 2)
        let registry = SchemaRegistryEmulator()
        let server = try await EmulatorHost.start([registry])
        try await body(Setup(harness: harness, registry: registry, server: server))
        await server.shutdown()
        await harness.shutdown()
    }

    func expectDelivered(_ fixes: [Fix], at emulator: FleetEngineEmulator, altitude: Double?) throws {
        for newest in Dictionary(grouping: fixes, by: \.vehicle).values.compactMap({ $0.max { $0.milliseconds < $1.milliseconds } }) {
            let held = try #require(emulator.vehicle(VehicleIdentity(kind: .vehicle, id: newest.vehicle))).lastLocation
            #expect(held["supplementalLocation"]?["latitude"]?.numberValue == newest.latitude)
            #expect(held["supplementalLocation"]?["longitude"]?.numberValue == newest.longitude)
            #expect(held["supplementalLocationTime"]?.stringValue == RFC3339.format(milliseconds: newest.milliseconds))
            #expect(held["speed"]?.numberValue == newest.speed)
            #expect(held["heading"]?.numberValue == Double(newest.heading))
            #expect(held["altitude"]?.numberValue == altitude)
        }
    }

    func allReceived(_ fixes: [Fix], _ emulator: FleetEngineEmulator) -> Bool {
        fixes.allSatisfy { emulator.vehicle(VehicleIdentity(kind: .vehicle, id: $0.vehicle))?.receivedFixTimes.contains($0.milliseconds) ?? false }
    }

    @Test func avroRecordsFromConfluentsSerializerArriveAsTheirFixes() async throws {
        try await withRegistry { setup in
            let harness = setup.harness
            let fixes = Self.fixes(prefix: "avro", vehicles: 4)
            let values = try setup.serialize(fixes, kind: "avro")
            #expect(values.count == fixes.count && values.allSatisfy { $0.first == 0 }, "framed: magic byte 0")
            let unknownId: [UInt8] = [0, 0, 0, 3, 0xE7, 0x02, 0x41]
            let garbage = Array(values[0].prefix(5)) + [0xFF, 0xFF, 0xFF]
            let unframed = Array(#"{"vehicle_id":"avro-0","lat":1,"lng":2,"recorded_at":1795381200000}"#.utf8)
            try await harness.produce(zip(fixes, values).map { (Array($0.vehicle.utf8), $1) }
                + [(Array("avro-0".utf8), unknownId), (Array("avro-1".utf8), garbage), (Array("avro-2".utf8), unframed)])
            let running = try setup.startRelay(group: "avro", mapping: Self.typedMapping)
            try await eventually("every fix reached the emulator") { allReceived(fixes, harness.emulator) }
            let letters = try await harness.readDeadLetters(count: 3)
            #expect(letters.map { $0.header("fleet-relay-error") ?? "" }.sorted() == ["undecodable", "undecodable", "unknown_schema"])
            #expect(letters.contains { $0.header("fleet-relay-detail") == "The Schema Registry does not know schema id 999." })
            #expect(letters.contains { $0.value == garbage && $0.header("fleet-relay-detail")?.hasPrefix("The value does not fit Avro schema 1:") == true })
            try expectDelivered(fixes, at: harness.emulator, altitude: 12.5)
            try await eventually("every record is committed") { try await harness.committedToTheEnd(group: "avro") }
            #expect(setup.registry.statistics.lookupsById == 2, "one lookup per id (the schema and the unknown 999), then the cache")
            try await running.stop()
        }
    }

    @Test func protobufRecordsFromConfluentsSerializerArriveAsTheirFixes() async throws {
        try await withRegistry { setup in
            let harness = setup.harness
            let fixes = Self.fixes(prefix: "proto", vehicles: 4)
            let values = try setup.serialize(fixes, kind: "protobuf")
            #expect(values.allSatisfy { Array($0.prefix(7)) == [0, 0, 0, 0, 2, 2, 2] },
                    "schema 2 (after its reference, id 1), message indexes [1]: the file's second message")
            try await setup.produce(fixes, values)
            let running = try setup.startRelay(group: "protobuf", mapping: Self.typedMapping)
            try await eventually("every fix reached the emulator") { allReceived(fixes, harness.emulator) }
            try expectDelivered(fixes, at: harness.emulator, altitude: 12.5)
            try await running.stop()

            // Repeated, packed, zig-zag and map fields, read through a mapping.
            let extras = FramedRecordDecoder(mapping: try MappingFile.parse("""
                fields: { vehicle_id: "tags[1]", lat: "samples[0]", lng: "samples[1]", recorded_at: recorded_at,
                          accuracy_m: "samples[2]", altitude_m: attributes.odometer }
                """, name: "extras"), source: setup.source)
            let record = InputRecord(key: nil, value: values[0])
            try await extras.prepare([record]) { Issue.record("registry unavailable: \($0)") }
            guard case .update(let update) = extras.decode(record) else {
                Issue.record("\(extras.decode(record))")
                return
            }
            #expect(update.vehicle.id == "protobuf")
            #expect(update.fix.latitude == 1 && update.fix.longitude == -2 && update.fix.accuracyMeters == 300)
            #expect(update.fix.altitudeMeters == 123_456)
        }
    }

    @Test func jsonSchemaRecordsArriveAsTheirFixes() async throws {
        try await withRegistry { setup in
            let harness = setup.harness
            let fixes = Self.fixes(prefix: "json", vehicles: 2)
            try await setup.produce(fixes, try setup.serialize(fixes, kind: "jsonschema"))
            let running = try setup.startRelay(group: "jsonschema", mapping: """
                fields: { vehicle_id: vehicle_id, lat: position.lat, lng: position.lng,
                          recorded_at: { path: recorded_at, format: epoch-micros }, speed_mps: speed_mps, heading: heading }
                """)
            try await eventually("every fix reached the emulator") { allReceived(fixes, harness.emulator) }
            try expectDelivered(fixes, at: harness.emulator, altitude: nil)
            try await running.stop()
        }
    }

    @Test func mappingCheckReadsFramedRecordsFromKafkaWithCredentialsItNeverShows() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let secret = "sentinel-registry-password-7f3a"
        let registry = SchemaRegistryEmulator(requiredCredentials: "relay:\(secret)")
        let server = try await EmulatorHost.start([registry])
        let fixes = Self.fixes(prefix: "check", vehicles: 1)
        // Registered by the test (the serializer has no credentials here), then written framed.
        let open = SchemaRegistryEmulator()
        let openServer = try await EmulatorHost.start([open])
        let values = try Self.serialize(fixes, kind: "avro", registry: openServer.baseURL, topic: harness.topic)
        registry.register(subject: harness.topic + "-value", schema: try #require(open.schemaText(id: 1)))
        try await harness.produce(zip(fixes, values).map { (Array($0.vehicle.utf8), $1) })
        let mapping = FileManager.default.temporaryDirectory.appendingPathComponent("typed-\(UUID().uuidString).yaml").path
        try Self.typedMapping.write(toFile: mapping, atomically: true, encoding: .utf8)
        let credentials = FileManager.default.temporaryDirectory.appendingPathComponent("registry-\(UUID().uuidString)").path
        try "relay:\(secret)\n".write(toFile: credentials, atomically: true, encoding: .utf8)

        let result = try await IntegrationTests.CommandLineTests().run([
            "mapping", "check", "--input-mapping", mapping, "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic,
            "--count", "2", "--schema-registry", server.baseURL, "--schema-registry-credentials-file", credentials,
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("/vehicles/check-0?updateMask=last_location"), "\(result.stdout)")
        #expect(result.stdout.hasSuffix("2 records: 2 sent, 0 skipped, 0 rejected\n"))
        #expect(!(result.stdout + result.stderr).contains(secret))

        let refused = try await IntegrationTests.CommandLineTests().run([
            "mapping", "check", "--input-mapping", mapping, "--file", mapping, "--schema-registry", "http://relay:\(secret)@127.0.0.1:1",
        ])
        #expect(refused.status == 78)
        #expect(refused.stderr.contains("--schema-registry must not hold credentials"))
        #expect(!refused.stderr.contains(secret))
        await server.shutdown()
        await openServer.shutdown()
        await harness.shutdown()
    }

    @Test(arguments: ["avro", "protobuf"])
    func simulateWritesFramedRecordsTheRelayReads(_ format: String) async throws {
        try await withRegistry { setup in
            let harness = setup.harness
            let simulated = try await IntegrationTests.CommandLineTests().run([
                "simulate", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--vehicles", "5",
                "--rate", "50", "--duration", "1", "--format", format, "--schema-registry", setup.server.baseURL,
            ])
            #expect(simulated.status == 0, "\(simulated.stderr)")
            let running = try setup.startRelay(group: "simulated-\(format)", mapping: nil)
            try await eventually("the five simulated vehicles reached the emulator") { harness.emulator.vehicles.count == 5 }
            try await eventually("every record is committed") { try await harness.committedToTheEnd(group: "simulated-\(format)") }
            #expect(running.relay.statistics.snapshot.deadLettered == 0)
            try await running.stop()
        }
    }

    @Test func aRegistryOutageDelaysRecordsAndLosesNone() async throws {
        try await withRegistry { setup in
            let harness = setup.harness
            let fixes = Self.fixes(prefix: "outage", vehicles: 3)
            try await setup.produce(fixes, try setup.serialize(fixes, kind: "avro"))
            setup.registry.setAvailable(false)
            let downSince = ContinuousClock.now
            let running = try setup.startRelay(group: "outage", mapping: Self.typedMapping)
            // A 10 s outage, through which the relay keeps asking (0.5, 1, 2, 4 s between tries).
            try await eventually("the registry was down for 10 s and asked again and again") {
                ContinuousClock.now - downSince >= .seconds(10) && setup.registry.statistics.refusedWhileDown >= 5
            }
            #expect(harness.emulator.statistics.updateRequests == 0, "nothing is sent without the schema")
            #expect(running.relay.statistics.snapshot.deadLettered == 0, "an outage dead-letters nothing")
            #expect(try await harness.committedOffsets(group: "outage").values.allSatisfy { $0 == nil }, "nothing committed meanwhile")
            setup.registry.setAvailable(true)
            try await eventually("every fix reached the emulator after the outage") { allReceived(fixes, harness.emulator) }
            try await eventually("every record is committed") { try await harness.committedToTheEnd(group: "outage") }
            #expect(running.relay.statistics.snapshot.deadLettered == 0)
            try await running.stop()
        }
    }

    /// SIGTERM while records wait for a registry that is down: the relay stops within its
    /// shutdown timeout instead of waiting for the registry, commits nothing, and the next
    /// relay delivers every record once the registry is back.
    @Test func aShutdownDuringARegistryOutageEndsAndLeavesTheRecordsUncommitted() async throws {
        try await withRegistry { setup in
            let harness = setup.harness
            let fixes = Self.fixes(prefix: "stop", vehicles: 3)
            try await setup.produce(fixes, try setup.serialize(fixes, kind: "avro"))
            setup.registry.setAvailable(false)
            let first = try setup.startRelay(group: "stop", mapping: Self.typedMapping) { $0.shutdownTimeout = .seconds(5) }
            try await eventually("the relay asks the registry again") { setup.registry.statistics.refusedWhileDown >= 2 }
            #expect(await first.stop(within: .seconds(60)), "graceful shutdown ended the relay while its records waited for the registry")
            #expect(try await harness.committedOffsets(group: "stop").values.allSatisfy { $0 == nil }, "nothing committed")
            #expect(harness.emulator.statistics.updateRequests == 0)

            setup.registry.setAvailable(true)
            let second = try setup.startRelay(group: "stop", mapping: Self.typedMapping)
            try await eventually("every fix reached the emulator", timeout: .seconds(120)) { allReceived(fixes, harness.emulator) }
            try await eventually("every record is committed") { try await harness.committedToTheEnd(group: "stop") }
            try await second.stop()
        }
    }
}

extension SchemaRegistryTests {
    /// The stand-in answers as Confluent's registry does, so that a relay relying on anything
    /// else fails here first: Avro without `schemaType`, Protobuf registered by Confluent's
    /// serializer as `.proto` text unless `format=serialized` (which the relay asks for),
    /// references as registered, versions and subjects as lists.
    @Test func theRegistryStandInAnswersAsConfluentsDoes() async throws {
        try await withRegistry { setup in
            _ = try setup.serialize(Self.fixes(prefix: "avro", vehicles: 1), kind: "avro")
            _ = try setup.serialize(Self.fixes(prefix: "proto", vehicles: 1), kind: "protobuf")
            let base = setup.server.baseURL
            let avro = try JSONParser.parse(Array(try await httpGet(base + "/schemas/ids/1").body.utf8))
            #expect(avro["schemaType"] == nil, "Avro is the default and not named")
            #expect(avro["schema"]?.stringValue?.contains("\"type\"") == true)

            let id = try #require(setup.registry.protobufIds.last, "the serializer registered a Protobuf schema")
            let text = try JSONParser.parse(Array(try await httpGet(base + "/schemas/ids/\(id)").body.utf8))
            #expect(text["schemaType"]?.stringValue == "PROTOBUF")
            let proto = try #require(text["schema"]?.stringValue)
            #expect(proto.hasPrefix("syntax = \"proto3\";") && proto.contains("message "), "\(proto)")
            #expect(Data(base64Encoded: proto) == nil, ".proto text, not the serialized descriptor")
            #expect((text["references"]?.arrayValue?.count ?? 0) >= 1, "its import, as a reference")

            let serialized = try JSONParser.parse(Array(try await httpGet(base + "/schemas/ids/\(id)?format=serialized").body.utf8))
            let descriptor = try #require(serialized["schema"]?.stringValue.flatMap { Data(base64Encoded: $0) })
            #expect((try? ProtobufSchema(file: Array(descriptor), dependencies: [])) != nil, "a FileDescriptorProto")

            let versions = try await httpGet(base + "/subjects/\(setup.harness.topic)-value/versions").body
            #expect(versions == "[1,2]", "the Avro schema, then the Protobuf one: \(versions)")
        }
    }
}
