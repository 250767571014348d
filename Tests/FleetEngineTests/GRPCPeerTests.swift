import Egress
import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import JSON
import Synchronization
import Testing

/// The relay's gRPC against independent peers: a grpcio server built on Google's own message
/// types, Google's own Python clients against the emulator, and the emulator's REST route.
@Suite(.serialized) struct GRPCPeerTests {
    static let fullFix = LocationFix(latitude: 37.5, longitude: -122.25, recordedAtMilliseconds: 1_795_381_200_123, heading: 90,
                                     speedMetersPerSecond: 12.5, accuracyMeters: 4.5, altitudeMeters: 30, sensor: .gps)
    static let pastFixes = [
        LocationFix(latitude: 37.4, longitude: -122.2, recordedAtMilliseconds: 1_795_381_199_000),
        LocationFix(latitude: 37.45, longitude: -122.21, recordedAtMilliseconds: 1_795_381_199_500, heading: 0, sensor: .network),
    ]

    /// Both kinds, both location modes, with and without past locations and optional fields.
    static func updates(prefix: String) -> [(VehicleLocationUpdate, LocationMode)] {
        let bare = LocationFix(latitude: -33.5, longitude: 151.25, recordedAtMilliseconds: 1_795_381_200_456)
        return [
            (VehicleLocationUpdate(vehicle: .init(kind: .vehicle, id: prefix + "veh-1"), lastLocation: fullFix, pastLocations: pastFixes),
             .supplemental),
            (VehicleLocationUpdate(vehicle: .init(kind: .vehicle, id: prefix + "veh-2"), lastLocation: bare), .device),
            (VehicleLocationUpdate(vehicle: .init(kind: .deliveryVehicle, id: prefix + "dv-1"), lastLocation: fullFix,
                                   pastLocations: pastFixes), .device),
            (VehicleLocationUpdate(vehicle: .init(kind: .deliveryVehicle, id: prefix + "dv-2"), lastLocation: bare), .supplemental),
        ]
    }

    /// One token per vehicle for the whole test run, so that what a peer received can be compared.
    static let tokens = Mutex<[VehicleIdentity: String]>([:])

    static func token(_ vehicle: VehicleIdentity) -> String {
        tokens.withLock { tokens in
            if let token = tokens[vehicle] { return token }
            let checks = EmulatorTokenCheckTests()
            let token = checks.token(checks.claims(kind: vehicle.kind, id: vehicle.id))
            tokens[vehicle] = token
            return token
        }
    }

    /// Times as milliseconds: REST writes `…59.000Z` where protobuf's JSON mapping writes `…59Z`.
    static func timesAsNumbers(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members): .object(members.mapValues(timesAsNumbers))
        case .array(let elements): .array(elements.map(timesAsNumbers))
        case .string(let text): RFC3339.parseMilliseconds(text).map { .number(Double($0)) } ?? value
        default: value
        }
    }

    static func client(_ url: String, _ wireProtocol: FleetEngineProtocol, mode: LocationMode, provider: String = "emu-project",
                       caFile: String) throws -> FleetEngineClient {
        FleetEngineClient(configuration: .init(baseURL: url, provider: provider, locationMode: mode, wireProtocol: wireProtocol,
                                               egress: try Egress.load(caFiles: [caFile])))
    }

    static func throwawayTLS() throws -> ThrowawayTLS {
        try ThrowawayTLS.generate(in: FileManager.default.temporaryDirectory.appendingPathComponent("grpc-tls-\(UUID().uuidString)").path)
    }

    /// Every field and mask path REST sends arrives in the gRPC message a grpcio server on
    /// Google's types reads: the message's vehicle in protobuf's JSON mapping equals REST's body.
    /// With the method, the routing header, the deadline and the token; and errors sent as
    /// trailers-only answers with `RetryInfo` read back.
    @Test func aGRPCServerOnGooglesMessageTypesReadsEveryFieldRESTSends() async throws {
        let tls = try Self.throwawayTLS()
        let peer = try PythonPeer("grpc_peer.py", [tls.certificateFile, tls.keyFile])
        let port = try #require(peer.readLine().split(separator: " ").last.flatMap { Int($0) })
        let url = "https://127.0.0.1:\(port)"
        let updates = Self.updates(prefix: "")
        for (update, mode) in updates {
            let client = try Self.client(url, .grpc, mode: mode, provider: "peer project", caFile: tls.caFile)
            let response = await client.send(update, token: Self.token(update.vehicle))
            #expect(response.outcome == .accepted, "\(update.vehicle): \(response.message)")
            let read = await client.fetchVehicle(update.vehicle, token: Self.token(update.vehicle))
            #expect(read.status == 200 && read.locationMilliseconds == 1_795_381_200_000, "\(read.message)")
            await client.shutdown()
        }
        let client = try Self.client(url, .grpc, mode: .supplemental, provider: "peer project", caFile: tls.caFile)
        let missing = VehicleIdentity(kind: .vehicle, id: "veh-missing"), throttled = VehicleIdentity(kind: .deliveryVehicle, id: "dv-throttled")
        let notFound = await client.send(VehicleLocationUpdate(vehicle: missing, lastLocation: Self.fullFix), token: Self.token(missing))
        #expect(notFound.outcome == .rejected(.vehicleNotFound))
        #expect(notFound.message == "NOT_FOUND: Vehicle providers/peer project/vehicles/veh-missing does not exist.")
        let refused = await client.send(VehicleLocationUpdate(vehicle: throttled, lastLocation: Self.fullFix), token: Self.token(throttled))
        #expect(refused.outcome == .transient(cause: .throttled, retryAfterSeconds: 7), "RetryInfo plays Retry-After")
        #expect(refused.message == "RESOURCE_EXHAUSTED: Quota exceeded 100%")
        await client.shutdown()

        let calls = try peer.finish().map { try JSONParser.parse($0) }
        #expect(calls.count == 2 * updates.count + 2)
        for (index, (update, mode)) in updates.enumerated() {
            let call = calls[2 * index], read = calls[2 * index + 1]
            let delivery = update.vehicle.kind == .deliveryVehicle
            let name = "providers/peer project/\(delivery ? "deliveryVehicles" : "vehicles")/\(update.vehicle.id)"
            #expect(call["method"]?.stringValue == (delivery ? "/maps.fleetengine.delivery.v1.DeliveryService/UpdateDeliveryVehicle"
                                                            : "/maps.fleetengine.v1.VehicleService/UpdateVehicle"))
            #expect(read["method"]?.stringValue == (delivery ? "/maps.fleetengine.delivery.v1.DeliveryService/GetDeliveryVehicle"
                                                            : "/maps.fleetengine.v1.VehicleService/GetVehicle"))
            for each in [call, read] {
                #expect(each["metadata"]?["authorization"]?.stringValue == "Bearer " + Self.token(update.vehicle))
                #expect(each["metadata"]?["x-goog-request-params"]?.stringValue == "provider_id=providers%2Fpeer%20project")
                let left = try #require(each["time_remaining"]?.numberValue)
                #expect(left > 5 && left <= 15, "grpc-timeout from the 15 s request timeout: \(left) s left")
            }
            #expect(read["message"]?["name"]?.stringValue == name)
            let message = try #require(call["message"])
            let vehicle = try #require(message[delivery ? "deliveryVehicle" : "vehicle"]?.objectValue)
            #expect(vehicle["name"]?.stringValue == (delivery ? name : nil), "a delivery vehicle is named inside, a vehicle beside")
            if !delivery { #expect(message["name"]?.stringValue == name) }
            let rest = try JSONParser.parse(FleetEngineRequest(update: update, provider: "p", mode: mode).body)
            #expect(Self.timesAsNumbers(.object(vehicle.filter { $0.key != "name" })) == Self.timesAsNumbers(rest),
                    "\(update.vehicle), \(mode)")
            let mask = update.pastLocations.isEmpty ? "lastLocation" : "lastLocation,pastLocations"
            #expect(message["updateMask"]?.stringValue == mask)
        }
    }

    /// Google's own Python clients call the emulator's gRPC route and get what Fleet Engine
    /// would answer: the vehicle, and errors with their codes, messages and `RetryInfo`.
    @Test func googlesOwnClientsCallTheEmulatorsGRPCRoute() async throws {
        let tls = try Self.throwawayTLS()
        let emulator = FleetEngineEmulator(key: EmulatorTokenCheckTests.key, provider: "emu-project", recordsHistory: true)
        let url = try await emulator.start(options: .init(tls: try tls.serverTLS()))
        emulator.injectFaults(.init(status: 429, retryAfter: "7"), count: 1)
        let tokens: [String: String] = [
            "vehicle": Self.token(.init(kind: .vehicle, id: "py-1")), "delivery": Self.token(.init(kind: .deliveryVehicle, id: "py-d1")),
            "missing": Self.token(.init(kind: .deliveryVehicle, id: "py-d1-missing")),
        ]
        let peer = try PythonPeer("fleet_engine_clients.py", [url.replacingOccurrences(of: "https://", with: ""), tls.caFile, "emu-project"])
        var json = JSONObjectWriter()
        for (key, value) in tokens { json.add(key, value) }
        peer.write(json.json)
        let results = try peer.finish().map { try JSONParser.parse($0) }
        let byCall = Dictionary(uniqueKeysWithValues: results.compactMap { result in result["call"]?.stringValue.map { ($0, result) } })
        await emulator.shutdown()

        func expectError(_ call: String, _ code: String, _ message: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(byCall[call]?["ok"] == .bool(false), "\(call): \(String(describing: byCall[call]))", sourceLocation: sourceLocation)
            #expect(byCall[call]?["code"]?.stringValue == code, "\(call)", sourceLocation: sourceLocation)
            if let message { #expect(byCall[call]?["message"]?.stringValue == message, sourceLocation: sourceLocation) }
        }
        expectError("update_throttled", "RESOURCE_EXHAUSTED", "Injected fault.")
        #expect(byCall["update_throttled"]?["retry_ms"]?.numberValue == 7000, "RetryInfo from Retry-After")
        #expect(byCall["update_throttled"]?["reason"]?.stringValue == "RATE_LIMIT_EXCEEDED")
        #expect(byCall["update_vehicle"]?["ok"] == .bool(true), "\(String(describing: byCall["update_vehicle"]))")
        #expect(byCall["update_vehicle"]?["name"]?.stringValue == "providers/emu-project/vehicles/py-1")
        #expect(byCall["get_vehicle"]?["time"]?.numberValue == 1_795_381_200_123)
        expectError("get_with_another_vehicles_token", "PERMISSION_DENIED")
        expectError("update_output_only", "INVALID_ARGUMENT", "lastLocation.serverTime is output-only or deprecated.")
        #expect(byCall["update_delivery_vehicle"]?["ok"] == .bool(true))
        #expect(byCall["get_delivery_vehicle"]?["time"]?.numberValue == 1_795_381_200_456)
        expectError("get_missing_delivery_vehicle", "NOT_FOUND", "Vehicle py-d1-missing does not exist.")
        expectError("update_unauthenticated", "UNAUTHENTICATED")

        let stored = try #require(emulator.vehicle(.init(kind: .vehicle, id: "py-1")))
        #expect(stored.receivedFixTimes == [1_795_381_199_000, 1_795_381_200_123], "last and past locations applied")
        #expect(stored.lastLocation["heading"]?.numberValue == 90)
        #expect(stored.lastLocation["supplementalLocationSensor"]?.stringValue == "CUSTOMER_SUPPLIED_LOCATION")
        let delivery = try #require(emulator.vehicle(.init(kind: .deliveryVehicle, id: "py-d1")))
        #expect(delivery.lastLocation["location"]?["latitude"]?.numberValue == -33.5)
        #expect(delivery.lastLocation["locationSensor"]?.stringValue == "GPS")
    }

    /// The same updates over REST and over gRPC leave the emulator in the same state, read the
    /// same live location back, and carry the token never indexed.
    @Test func theSameUpdatesOverRESTAndGRPCLeaveTheEmulatorInTheSameState() async throws {
        let tls = try Self.throwawayTLS()
        let emulator = FleetEngineEmulator(key: EmulatorTokenCheckTests.key, provider: "emu-project", recordsHistory: true)
        let url = try await emulator.start(options: .init(tls: try tls.serverTLS()))
        for wireProtocol in FleetEngineProtocol.allCases {
            for (update, mode) in Self.updates(prefix: wireProtocol.rawValue + "-") {
                let client = try Self.client(url, wireProtocol, mode: mode, caFile: tls.caFile)
                let response = await client.send(update, token: Self.token(update.vehicle))
                #expect(response.outcome == .accepted, "\(wireProtocol): \(update.vehicle): \(response.message)")
                let read = await client.fetchVehicle(update.vehicle, token: Self.token(update.vehicle))
                #expect(read.status == 200 && read.locationMilliseconds == update.lastLocation.recordedAtMilliseconds)
                await client.shutdown()
            }
        }
        let transport = try #require(emulator.transportStatistics)
        await emulator.shutdown()
        for (update, _) in Self.updates(prefix: "") {
            let overREST = try #require(emulator.vehicle(.init(kind: update.vehicle.kind, id: "rest-" + update.vehicle.id)))
            let overGRPC = try #require(emulator.vehicle(.init(kind: update.vehicle.kind, id: "grpc-" + update.vehicle.id)))
            #expect(overGRPC.lastLocation == overREST.lastLocation, "\(update.vehicle)")
            #expect(overGRPC.receivedFixTimes == overREST.receivedFixTimes)
            #expect(overGRPC.pastLocationsReceived == overREST.pastLocationsReceived)
            #expect(overGRPC.updates == 1 && overREST.updates == 1)
        }
        #expect(transport.authorizationsNeverIndexed == 16, "every request's token, over both protocols")
        #expect(transport.authorizationsIndexable == 0)
    }
}
