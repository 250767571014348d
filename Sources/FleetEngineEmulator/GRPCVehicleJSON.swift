import FleetEngine
import FleetEngineProtos
import Synchronization
import SwiftProtobuf

/// REST's JSON body for a vehicle message of the shape a location update has (a last location
/// and past locations, each of the fields below), written field by field as protobuf's JSON
/// mapping writes them. Protobuf's own JSON encoder spent about 6 µs on each location: half of
/// the emulator's CPU in a backlog drain over gRPC, on the cores the relay measured runs on.
/// A message with any other field set, an unknown field, or a value the mapping writes in a form
/// of its own (a time finer than milliseconds, a number that is not finite) gets nil: the caller
/// then takes protobuf's encoder, so the validation always sees protobuf's JSON mapping.
enum GRPCVehicleJSON {
    static func body(of vehicle: some PlainVehicleFields) -> [UInt8]? {
        var others = vehicle
        others.clearLastLocation()
        others.pastLocations = []
        guard others == type(of: vehicle).init() else { return nil }
        var writer = Writer()
        writer.raw("{")
        if vehicle.hasLastLocation {
            writer.raw("\"lastLocation\":")
            guard writer.location(vehicle.lastLocation) else { return nil }
        }
        if !vehicle.pastLocations.isEmpty {
            writer.raw(vehicle.hasLastLocation ? ",\"pastLocations\":[" : "\"pastLocations\":[")
            for (index, location) in vehicle.pastLocations.enumerated() {
                if index > 0 { writer.raw(",") }
                guard writer.location(location) else { return nil }
            }
            writer.raw("]")
        }
        writer.raw("}")
        return writer.bytes
    }

    private struct Writer {
        var bytes: [UInt8] = []
        /// No member of the object being written has been written yet.
        private var atFirstMember = true

        mutating func raw(_ text: StaticString) {
            bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }

        private mutating func member(_ name: StaticString) {
            if !atFirstMember { raw(",") }
            raw(name)
            atFirstMember = false
        }

        /// False when the location is not of the plain shape.
        mutating func location<Location: PlainLocationFields>(_ location: Location) -> Bool {
            guard location.hasOnlyPlainFields else { return false }
            raw("{")
            atFirstMember = true
            func sensor(_ sensor: Location.Sensor) -> [UInt8]? {
                sensor.rawValue == 0 ? nil : SensorNames.json(of: sensor, in: Location.self)
            }
            guard reading(.own, point: location.hasLocation ? location.location : nil,
                          time: location.hasUpdateTime ? location.updateTime : nil, sensor: sensor(location.locationSensor),
                          accuracy: location.hasLatlngAccuracy ? location.latlngAccuracy.value : nil),
                  reading(.supplemental, point: location.hasSupplementalLocation ? location.supplementalLocation : nil,
                          time: location.hasSupplementalLocationTime ? location.supplementalLocationTime : nil,
                          sensor: sensor(location.supplementalLocationSensor),
                          accuracy: location.hasSupplementalLocationAccuracy ? location.supplementalLocationAccuracy.value : nil)
            else { return false }
            if location.hasHeading {
                member("\"heading\":")
                bytes += String(location.heading.value).utf8
            }
            guard number("\"speed\":", location.hasSpeed ? location.speed.value : nil),
                  number("\"altitude\":", location.hasAltitude ? location.altitude.value : nil) else { return false }
            raw("}")
            return true
        }

        /// The member names of a location's own reading or of its supplemental one.
        private struct ReadingNames {
            let point, time, sensor, accuracy: StaticString

            static let own = ReadingNames(point: "\"location\":", time: "\"updateTime\":", sensor: "\"locationSensor\":",
                                          accuracy: "\"latlngAccuracy\":")
            static let supplemental = ReadingNames(point: "\"supplementalLocation\":", time: "\"supplementalLocationTime\":",
                                                   sensor: "\"supplementalLocationSensor\":",
                                                   accuracy: "\"supplementalLocationAccuracy\":")
        }

        /// A reading's point, time, sensor (its JSON) and accuracy, each when present.
        private mutating func reading(_ names: ReadingNames, point: Google_Type_LatLng?, time: Google_Protobuf_Timestamp?,
                                      sensor: [UInt8]?, accuracy: Double?) -> Bool {
            if let point {
                member(names.point)
                guard latLng(point) else { return false }
            }
            if let time {
                member(names.time)
                guard self.time(time) else { return false }
            }
            if let sensor {
                member(names.sensor)
                bytes += sensor
            }
            return number(names.accuracy, accuracy)
        }

        /// A number member when present.
        private mutating func number(_ name: StaticString, _ value: Double?) -> Bool {
            guard let value else { return true }
            member(name)
            return number(value)
        }

        /// proto3 leaves a scalar at its default (positive zero) out.
        private mutating func latLng(_ point: Google_Type_LatLng) -> Bool {
            raw("{")
            if point.latitude.bitPattern != 0 {
                raw("\"latitude\":")
                guard number(point.latitude) else { return false }
            }
            if point.longitude.bitPattern != 0 {
                raw(point.latitude.bitPattern != 0 ? ",\"longitude\":" : "\"longitude\":")
                guard number(point.longitude) else { return false }
            }
            raw("}")
            return true
        }

        /// Shortest round-trip digits, as protobuf writes a finite double.
        private mutating func number(_ value: Double) -> Bool {
            guard value.isFinite else { return false }
            bytes += value.description.utf8
            return true
        }

        /// RFC 3339 in UTC with no fraction for whole seconds and three digits for milliseconds,
        /// as protobuf writes them; finer times are left to protobuf.
        private mutating func time(_ timestamp: Google_Protobuf_Timestamp) -> Bool {
            guard timestamp.nanos >= 0, timestamp.nanos % 1_000_000 == 0,
                  (-62_135_596_800...253_402_300_799).contains(timestamp.seconds) else { return false }
            let text = RFC3339.format(milliseconds: timestamp.seconds * 1000 + Int64(timestamp.nanos / 1_000_000))
            raw("\"")
            bytes += timestamp.nanos == 0 ? text.utf8.prefix(19) : text.utf8.dropLast()
            raw("Z\"")
            return true
        }
    }
}

/// A vehicle message whose last location can be cleared, to see what else it sets (a vehicle
/// message is small: comparing it costs little).
protocol PlainVehicleFields: GRPCVehicleMessage, Equatable where Location: PlainLocationFields {
    mutating func clearLastLocation()
}

extension Maps_Fleetengine_V1_Vehicle: PlainVehicleFields {}
extension Maps_Fleetengine_Delivery_V1_DeliveryVehicle: PlainVehicleFields {}

/// The location fields a plain update sets, and the message's other fields (each of which
/// Fleet Engine refuses in an update: the validator must see them in protobuf's own JSON).
protocol PlainLocationFields: GRPCVehicleLocation {
    var hasLocation: Bool { get }
    var hasLatlngAccuracy: Bool { get }
    var hasSupplementalLocation: Bool { get }
    var hasSupplementalLocationAccuracy: Bool { get }
    var hasHeading: Bool { get }
    var hasSpeed: Bool { get }
    var hasAltitude: Bool { get }
    var hasServerTime: Bool { get }
    var hasHorizontalAccuracy: Bool { get }
    var hasSpeedKmph: Bool { get }
    var roadSnapped: Bool { get }
}

extension Maps_Fleetengine_V1_VehicleLocation: PlainLocationFields {}
extension Maps_Fleetengine_Delivery_V1_DeliveryVehicleLocation: PlainLocationFields {}

extension PlainLocationFields {
    /// None of the other fields, and no unknown field in it or in the plain fields' messages.
    /// (Asked field by field: clearing the plain fields of a copy and comparing it with an empty
    /// message cost as much as protobuf's JSON encoder.)
    var hasOnlyPlainFields: Bool {
        !hasServerTime && !hasHorizontalAccuracy && !hasSpeedKmph && !roadSnapped
            && unknownFields.data.isEmpty && location.unknownFields.data.isEmpty && updateTime.unknownFields.data.isEmpty
            && latlngAccuracy.unknownFields.data.isEmpty && supplementalLocation.unknownFields.data.isEmpty
            && supplementalLocationTime.unknownFields.data.isEmpty && supplementalLocationAccuracy.unknownFields.data.isEmpty
            && heading.unknownFields.data.isEmpty && speed.unknownFields.data.isEmpty && altitude.unknownFields.data.isEmpty
    }
}

/// A sensor's JSON as protobuf writes it (its name in quotes, or its number when the enum does
/// not name it), asked of protobuf once per value and kept.
private enum SensorNames {
    private struct Key: Hashable {
        let type: ObjectIdentifier
        let number: Int
    }

    private static let known = Mutex<[Key: [UInt8]]>([:])

    static func json<Location: PlainLocationFields>(of sensor: Location.Sensor, in _: Location.Type) -> [UInt8] {
        let key = Key(type: ObjectIdentifier(Location.self), number: sensor.rawValue)
        if let json = known.withLock({ $0[key] }) { return json }
        var alone = Location()
        alone.locationSensor = sensor
        // `{"locationSensor":X}`: X is what follows the first colon, up to the closing brace.
        let object: [UInt8] = (try? alone.jsonUTF8Bytes()) ?? Array("{\"locationSensor\":\(sensor.rawValue)}".utf8)
        let json = Array(object[(object.firstIndex(of: UInt8(ascii: ":"))! + 1)..<(object.count - 1)])
        known.withLock { $0[key] = json }
        return json
    }
}
