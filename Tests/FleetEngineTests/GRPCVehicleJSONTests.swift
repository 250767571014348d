@testable import FleetEngineEmulator
import FleetEngineProtos
import JSON
import SwiftProtobuf
import Testing

/// The emulator writes an update's vehicle as REST's JSON itself. Protobuf's JSON mapping is the
/// reference: whatever protobuf writes, the emulator's JSON reads as the same document, or the
/// emulator leaves the message to protobuf.
@Suite struct GRPCVehicleJSONTests {
    /// A field number neither message has, as a varint field of value 1.
    static let unknownField: [UInt8] = [0x98, 0x06, 0x01]

    static func location<Location: PlainLocationFields>(_: Location.Type,
                                                        using random: inout some RandomNumberGenerator) throws -> Location {
        func often() -> Bool { Int.random(in: 0..<10, using: &random) < 7 }
        func rarely() -> Bool { Int.random(in: 0..<40, using: &random) == 0 }
        func double() -> Double {
            [0, -0.0, 1, 37.5, -122.25, 95, 1e-7, 1e21, 0.1 + 0.2, .nan, .infinity,
             Double.random(in: -180...180, using: &random)].randomElement(using: &random)!
        }
        func time() -> Google_Protobuf_Timestamp {
            var time = Google_Protobuf_Timestamp()
            time.seconds = [0, 1_764_345_600, Int64.random(in: -62_135_596_800...253_402_300_799, using: &random),
                            253_402_300_800, -62_135_596_801].randomElement(using: &random)!
            time.nanos = [0, 123_000_000, 999_000_000, 1, 500_000, -1].randomElement(using: &random)!
            return time
        }
        func point() -> Google_Type_LatLng {
            var point = Google_Type_LatLng()
            point.latitude = double()
            point.longitude = double()
            return point
        }
        func sensor() -> Location.Sensor { Location.Sensor(rawValue: [0, 1, 2, 3, 4, 5, 6, 100, 200, 999].randomElement(using: &random)!)! }
        var location = Location()
        if often() { location.location = point() }
        if often() { location.updateTime = time() }
        if often() { location.locationSensor = sensor() }
        if often() { location.latlngAccuracy = Google_Protobuf_DoubleValue(double()) }
        if rarely() { location.supplementalLocation = point() }
        if rarely() { location.supplementalLocationTime = time() }
        if rarely() { location.supplementalLocationSensor = sensor() }
        if rarely() { location.supplementalLocationAccuracy = Google_Protobuf_DoubleValue(double()) }
        if often() { location.heading = Google_Protobuf_Int32Value(Int32.random(in: -400...400, using: &random)) }
        if often() { location.speed = Google_Protobuf_DoubleValue(double()) }
        if rarely() { location.altitude = Google_Protobuf_DoubleValue(double()) }
        if rarely() { try location.merge(serializedBytes: Self.unknownField) }
        if rarely() {  // a field the plain shape has not (each is refused in an update)
            var other = Maps_Fleetengine_V1_VehicleLocation()
            switch Int.random(in: 0..<4, using: &random) {
            case 0: other.serverTime = time()
            case 1: other.horizontalAccuracy = Google_Protobuf_DoubleValue(double())
            case 2: other.speedKmph = Google_Protobuf_Int32Value(50)
            default: other.roadSnapped = true
            }
            // The two location messages number their fields alike.
            try location.merge(serializedBytes: other.serializedBytes() as [UInt8])
        }
        return location
    }

    static func vehicle<Vehicle: PlainVehicleFields>(_: Vehicle.Type, using random: inout some RandomNumberGenerator) throws -> Vehicle {
        var vehicle = Vehicle()
        if Int.random(in: 0..<10, using: &random) > 0 { vehicle.lastLocation = try location(Vehicle.Location.self, using: &random) }
        vehicle.pastLocations = try (0..<Int.random(in: 0...3, using: &random)).map { _ in
            try location(Vehicle.Location.self, using: &random)
        }
        if Int.random(in: 0..<40, using: &random) == 0 { try vehicle.merge(serializedBytes: Self.unknownField) }
        return vehicle
    }

    /// What each way makes of a vehicle: the parsed document, or nothing (protobuf refuses to
    /// write it: a time out of its range).
    static func check(_ vehicle: some PlainVehicleFields, written: inout Int, left: inout Int) throws {
        let reference = try? JSONParser.parse(vehicle.jsonUTF8Bytes() as [UInt8])
        guard let own = GRPCVehicleJSON.body(of: vehicle) else {
            left += 1
            return
        }
        written += 1
        #expect(try JSONParser.parse(own) == reference, "\(String(decoding: own, as: UTF8.self)) for \(vehicle)")
    }

    @Test func randomVehiclesReadAsProtobufsJSONOrAreLeftToIt() throws {
        var random = SystemRandomNumberGenerator()
        var (written, left) = (0, 0)
        for _ in 0..<2_000 {
            try Self.check(Self.vehicle(Maps_Fleetengine_V1_Vehicle.self, using: &random), written: &written, left: &left)
            try Self.check(Self.vehicle(Maps_Fleetengine_Delivery_V1_DeliveryVehicle.self, using: &random),
                           written: &written, left: &left)
        }
        #expect(written > 400 && left > 400, "both ways taken: \(written) written, \(left) left to protobuf")
    }

    /// The shape the relay sends (a point, a time in milliseconds, a sensor, accuracy, heading,
    /// speed; past locations alike) is written by the emulator itself.
    @Test func anUpdatesUsualShapeIsWrittenByTheEmulator() throws {
        var location = Maps_Fleetengine_V1_VehicleLocation()
        location.location = .with { $0.latitude = 52.520008; $0.longitude = 13.404954 }
        location.updateTime = Google_Protobuf_Timestamp(seconds: 1_764_345_600, nanos: 123_000_000)
        location.locationSensor = .gps
        location.latlngAccuracy = Google_Protobuf_DoubleValue(4.5)
        location.heading = Google_Protobuf_Int32Value(90)
        location.speed = Google_Protobuf_DoubleValue(8.5)
        var vehicle = Maps_Fleetengine_V1_Vehicle()
        vehicle.lastLocation = location
        vehicle.pastLocations = [location, location]
        let own = try #require(GRPCVehicleJSON.body(of: vehicle))
        #expect(try JSONParser.parse(own) == JSONParser.parse(vehicle.jsonUTF8Bytes() as [UInt8]))
        #expect(String(decoding: own, as: UTF8.self).contains(#""updateTime":"2025-11-28T16:00:00.123Z","locationSensor":"GPS""#))
    }
}
