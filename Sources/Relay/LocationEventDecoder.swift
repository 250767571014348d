import FleetAuth
import FleetEngine
import JSON

/// Why an event was rejected; the raw value is the dead-letter `fleet-relay-error`
/// header and a metric label (contract: events.md).
public enum RejectionReason: String, Sendable, CaseIterable {
    case notJSON = "not_json"
    case notObject = "not_object"
    case tooLarge = "too_large"
    case missingField = "missing_field"
    case wrongType = "wrong_type"
    case outOfRange = "out_of_range"
    case badVehicleId = "bad_vehicle_id"
    case badTimestamp = "bad_timestamp"
    case futureTimestamp = "future_timestamp"
    case keyMismatch = "key_mismatch"
    case unknownKind = "unknown_kind"
}

public struct Rejection: Error, Sendable, Equatable {
    public let reason: RejectionReason
    /// One human sentence for the dead-letter `fleet-relay-detail` header.
    public let detail: String
}

/// A decoded event: one fix of one vehicle.
public struct LocationUpdate: Sendable, Equatable {
    public let vehicle: VehicleIdentity
    public let fix: LocationFix

    public init(vehicle: VehicleIdentity, fix: LocationFix) {
        self.vehicle = vehicle
        self.fix = fix
    }
}

/// Turns a record's key and value into a `LocationUpdate` or a `Rejection`
/// (contract: events.md). Pure apart from the injected clock.
public struct LocationEventDecoder: Sendable {
    public static let maximumValueBytes = 64 * 1024
    public static let maximumFutureMilliseconds: Int64 = 5 * 60 * 1000
    public static let maximumVehicleIdLength = 64

    public let defaultKind: VehicleKind
    private let nowMilliseconds: @Sendable () -> Int64

    public init(defaultKind: VehicleKind = .vehicle,
                nowMilliseconds: @escaping @Sendable () -> Int64 = { WallClock.nowMilliseconds() }) {
        self.defaultKind = defaultKind
        self.nowMilliseconds = nowMilliseconds
    }

    public func decode(key: [UInt8]?, value: [UInt8]) -> Result<LocationUpdate, Rejection> {
        do {
            return .success(try decodeOrThrow(key: key, value: value))
        } catch {
            return .failure(error)
        }
    }

    private func decodeOrThrow(key: [UInt8]?, value: [UInt8]) throws(Rejection) -> LocationUpdate {
        guard value.count <= Self.maximumValueBytes else {
            throw Rejection(reason: .tooLarge, detail: "The value is \(value.count) bytes; the limit is \(Self.maximumValueBytes).")
        }
        let document: JSONValue
        do {
            document = try JSONParser.parse(value)
        } catch {
            throw Rejection(reason: .notJSON, detail: "The value is not JSON: \(error.message) at byte \(error.offset).")
        }
        guard case .object(let fields) = document else {
            throw Rejection(reason: .notObject, detail: "The value is a JSON \(document.typeName), not an object.")
        }
        let event = EventFields(fields)
        let vehicleId = try event.requiredString("vehicle_id")
        let latitude = try event.requiredNumber("lat")
        let longitude = try event.requiredNumber("lng")
        let recordedAt = try event.required("recorded_at")
        try Self.validateVehicleId(vehicleId)
        if let key, key != Array(vehicleId.utf8) {
            throw Rejection(reason: .keyMismatch, detail: "The record key \(Self.printable(key)) differs from vehicle_id \(JSONText.quoted(vehicleId)).")
        }
        try Self.check(latitude, in: -90...90, field: "lat")
        try Self.check(longitude, in: -180...180, field: "lng")
        var fix = LocationFix(latitude: latitude, longitude: longitude, recordedAtMilliseconds: try timestamp(recordedAt))
        if let heading = try event.optionalNumber("heading") { fix.heading = try Self.heading(heading) }
        if let speed = try event.optionalNumber("speed_mps") { fix.speedMetersPerSecond = try Self.nonNegative(speed, field: "speed_mps") }
        if let accuracy = try event.optionalNumber("accuracy_m") { fix.accuracyMeters = try Self.nonNegative(accuracy, field: "accuracy_m") }
        if let altitude = try event.optionalNumber("altitude_m") { fix.altitudeMeters = try Self.finite(altitude, field: "altitude_m") }
        if let sensor = try event.optionalString("sensor") { fix.sensor = try Self.sensor(sensor) }
        var kind = defaultKind
        if let name = try event.optionalString("kind") { kind = try Self.kind(name) }
        return LocationUpdate(vehicle: VehicleIdentity(kind: kind, id: vehicleId), fix: fix)
    }

    // MARK: Field rules

    static func validateVehicleId(_ id: String) throws(Rejection) {
        // Nearly every id is short printable ASCII: one pass over the bytes settles it.
        let utf8 = id.utf8
        if utf8.count >= 1, utf8.count <= maximumVehicleIdLength, utf8.allSatisfy(isPlainIdByte) { return }
        let length = id.unicodeScalars.count
        guard length >= 1, length <= maximumVehicleIdLength else {
            throw Rejection(reason: .badVehicleId, detail: "vehicle_id must be 1 to \(maximumVehicleIdLength) characters long, not \(length).")
        }
        for scalar in id.unicodeScalars {
            if "/:\\?#".unicodeScalars.contains(scalar) {
                throw Rejection(reason: .badVehicleId, detail: "vehicle_id must not contain '\(scalar)'.")
            }
            if scalar.properties.generalCategory == .control {
                throw Rejection(reason: .badVehicleId, detail: "vehicle_id must not contain control characters.")
            }
        }
    }

    /// Printable ASCII other than the characters a path segment must not hold.
    private static func isPlainIdByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x21...0x7E: byte != UInt8(ascii: "/") && byte != UInt8(ascii: ":") && byte != UInt8(ascii: "\\")
            && byte != UInt8(ascii: "?") && byte != UInt8(ascii: "#")
        case 0x20: true
        default: false
        }
    }

    private func timestamp(_ value: JSONValue) throws(Rejection) -> Int64 {
        let milliseconds: Int64
        switch value {
        case .string(let text):
            guard let parsed = RFC3339.parseMilliseconds(text) else {
                throw Rejection(reason: .badTimestamp, detail: "recorded_at \(JSONText.quoted(text)) is not an RFC 3339 timestamp with offset.")
            }
            milliseconds = parsed
        case .number(let number):
            guard number.isFinite, number >= 0, number == number.rounded(), number < 1e15 else {
                throw Rejection(reason: .badTimestamp, detail: "recorded_at must be whole epoch milliseconds.")
            }
            milliseconds = Int64(number)
        default:
            throw Rejection(reason: .wrongType, detail: "recorded_at must be a string or a number, not \(value.typeName).")
        }
        let now = nowMilliseconds()
        guard milliseconds <= now + Self.maximumFutureMilliseconds else {
            throw Rejection(reason: .futureTimestamp, detail: "recorded_at \(RFC3339.format(milliseconds: milliseconds)) is more than 5 minutes in the future.")
        }
        return milliseconds
    }

    private static func check(_ value: Double, in range: ClosedRange<Double>, field: String) throws(Rejection) {
        guard value.isFinite, range.contains(value) else {
            throw Rejection(reason: .outOfRange, detail: "\(field) must be a finite number from \(range.lowerBound) to \(range.upperBound).")
        }
    }

    private static func finite(_ value: Double, field: String) throws(Rejection) -> Double {
        guard value.isFinite else { throw Rejection(reason: .outOfRange, detail: "\(field) must be finite.") }
        return value
    }

    private static func nonNegative(_ value: Double, field: String) throws(Rejection) -> Double {
        guard value.isFinite, value >= 0 else {
            throw Rejection(reason: .outOfRange, detail: "\(field) must be a finite number ≥ 0.")
        }
        return value
    }

    /// 0 ≤ h < 360, sent as the nearest whole degree (359.5 and above wraps to 0).
    private static func heading(_ value: Double) throws(Rejection) -> Int {
        guard value.isFinite, value >= 0, value < 360 else {
            throw Rejection(reason: .outOfRange, detail: "heading must be at least 0 and below 360.")
        }
        return Int(value.rounded()) % 360
    }

    private static func sensor(_ name: String) throws(Rejection) -> LocationSensor {
        guard let sensor = LocationSensor(rawValue: name) else {
            let names = LocationSensor.allCases.map(\.rawValue).joined(separator: ", ")
            throw Rejection(reason: .outOfRange, detail: "sensor \(JSONText.quoted(name)) is not one of \(names).")
        }
        return sensor
    }

    private static func kind(_ name: String) throws(Rejection) -> VehicleKind {
        guard let kind = VehicleKind(rawValue: name) else {
            throw Rejection(reason: .unknownKind, detail: "kind \(JSONText.quoted(name)) is neither vehicle nor delivery_vehicle.")
        }
        return kind
    }

    private static func printable(_ key: [UInt8]) -> String {
        guard let text = String(validating: key.prefix(80), as: UTF8.self) else { return "(\(key.count) non-UTF-8 bytes)" }
        return JSONText.quoted(text)
    }
}

/// Typed access to an event's fields; `null` counts as absent.
private struct EventFields {
    let fields: [String: JSONValue]

    init(_ fields: [String: JSONValue]) { self.fields = fields }

    func required(_ name: String) throws(Rejection) -> JSONValue {
        guard let value = fields[name], value != .null else {
            throw Rejection(reason: .missingField, detail: "Required field \(name) is missing.")
        }
        return value
    }

    func requiredString(_ name: String) throws(Rejection) -> String {
        let value = try required(name)
        guard case .string(let text) = value else { throw wrongType(name, "a string", value) }
        return text
    }

    func requiredNumber(_ name: String) throws(Rejection) -> Double {
        let value = try required(name)
        guard case .number(let number) = value else { throw wrongType(name, "a number", value) }
        return number
    }

    func optionalNumber(_ name: String) throws(Rejection) -> Double? {
        guard let value = fields[name], value != .null else { return nil }
        guard case .number(let number) = value else { throw wrongType(name, "a number", value) }
        return number
    }

    func optionalString(_ name: String) throws(Rejection) -> String? {
        guard let value = fields[name], value != .null else { return nil }
        guard case .string(let text) = value else { throw wrongType(name, "a string", value) }
        return text
    }

    private func wrongType(_ name: String, _ expected: String, _ value: JSONValue) -> Rejection {
        Rejection(reason: .wrongType, detail: "\(name) must be \(expected), not \(value.typeName).")
    }
}
