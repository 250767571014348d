import FleetAuth
import FleetEngine
import FleetModel
import JSON

/// Why an event was rejected; the raw value is the dead-letter `fleet-relay-error`
/// header and a metric label (docs/events.md).
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
    /// Schema Registry framing names a schema id the registry does not know.
    case unknownSchema = "unknown_schema"
    /// A framed value its schema cannot decode, or a value without the framing.
    case undecodable

    /// The reasons a native JSON event can have (the others concern registry framing).
    public static let ofTheNativeEvent: [RejectionReason] = allCases.filter { $0 != .unknownSchema && $0 != .undecodable }
}

public struct Rejection: Error, Sendable, Equatable {
    public let reason: RejectionReason
    /// One human sentence for the dead-letter `fleet-relay-detail` header.
    public let detail: String

    public init(reason: RejectionReason, detail: String) {
        self.reason = reason
        self.detail = detail
    }
}

/// Turns a record's key and value into a `LocationUpdate` or a `Rejection`
/// (docs/events.md). Pure apart from the injected clock.
public struct LocationEventDecoder: Sendable {
    public static let maximumValueBytes = 64 * 1024
    public static let maximumFutureMilliseconds: Int64 = 5 * 60 * 1000
    public static let maximumVehicleIdLength = 64

    public let defaultKind: VehicleKind
    private let nowMilliseconds: @Sendable () -> Int64

    public init(defaultKind: VehicleKind = .vehicle,
                nowMilliseconds: @escaping @Sendable () -> Int64 = { WallClock.coarseNowMilliseconds() }) {
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
        return try value.withUnsafeBufferPointer { (value) throws(Rejection) -> LocationUpdate in
            try withUnsafeTemporaryAllocation(of: JSONField?.self, capacity: EventFields.names.count) { (values) throws(Rejection) -> LocationUpdate in
                values.initialize(repeating: nil)  // `JSONField` holds no reference: nothing to deinitialize
                let other: JSONValue?
                do throws(JSONParseError) {
                    other = try JSONParser.parseTopLevel(value, fields: EventFields.names, into: values)
                } catch {
                    throw Rejection(reason: .notJSON, detail: "The value is not JSON: \(error.message) at byte \(error.offset).")
                }
                if let other { throw Rejection(reason: .notObject, detail: "The value is a JSON \(other.typeName), not an object.") }
                return try update(of: EventFields(UnsafeBufferPointer(values), in: value), key: key)
            }
        }
    }

    private func update(of event: EventFields, key: [UInt8]?) throws(Rejection) -> LocationUpdate {
        let vehicleId = try event.requiredString(.vehicleId)
        let latitude = try event.requiredNumber(.lat)
        let longitude = try event.requiredNumber(.lng)
        try FieldRules.validateVehicleId(vehicleId)
        if let key, !key.isUTF8(of: vehicleId) {
            throw Rejection(reason: .keyMismatch, detail: "The record key \(FieldRules.printable(key)) differs from vehicle_id \(JSONText.quoted(vehicleId)).")
        }
        try FieldRules.check(latitude, in: -90...90, field: EventFields.Field.lat.name)
        try FieldRules.check(longitude, in: -180...180, field: EventFields.Field.lng.name)
        var fix = LocationFix(latitude: latitude, longitude: longitude, recordedAtMilliseconds: try event.timestamp(.recordedAt, nowMilliseconds: nowMilliseconds()))
        if let heading = try event.optionalNumber(.heading) { fix.heading = try FieldRules.heading(heading) }
        if let speed = try event.optionalNumber(.speed) { fix.speedMetersPerSecond = try FieldRules.nonNegative(speed, field: EventFields.Field.speed.name) }
        if let accuracy = try event.optionalNumber(.accuracy) { fix.accuracyMeters = try FieldRules.nonNegative(accuracy, field: EventFields.Field.accuracy.name) }
        if let altitude = try event.optionalNumber(.altitude) { fix.altitudeMeters = try FieldRules.finite(altitude, field: EventFields.Field.altitude.name) }
        if let sensor = try event.optionalString(.sensor) { fix.sensor = try FieldRules.sensor(sensor) }
        var kind = defaultKind
        if let name = try event.optionalString(.kind) { kind = try FieldRules.kind(name) }
        return LocationUpdate(vehicle: VehicleIdentity(kind: kind, id: vehicleId), fix: fix)
    }
}

/// Typed access to an event's fields; `null` counts as absent. The parser hands over the
/// values of these fields alone, by position, the last of a repeated name counting, into
/// memory the decoding of one record holds; strings are made from the record's bytes only
/// when read, and a time given as text is read from them in place.
private struct EventFields {
    enum Field: Int, CaseIterable {
        case vehicleId, lat, lng, recordedAt, heading, speed, accuracy, altitude, sensor, kind

        var name: String {
            switch self {
            case .vehicleId: "vehicle_id"
            case .lat: "lat"
            case .lng: "lng"
            case .recordedAt: "recorded_at"
            case .heading: "heading"
            case .speed: "speed_mps"
            case .accuracy: "accuracy_m"
            case .altitude: "altitude_m"
            case .sensor: "sensor"
            case .kind: "kind"
            }
        }
    }

    static let names = JSONFieldNames(Field.allCases.map(\.name))

    let values: UnsafeBufferPointer<JSONField?>
    /// The record's value, where the strings lie.
    let input: UnsafeBufferPointer<UInt8>

    init(_ values: UnsafeBufferPointer<JSONField?>, in input: UnsafeBufferPointer<UInt8>) {
        self.values = values
        self.input = input
    }

    private subscript(field: Field) -> JSONField? {
        values[field.rawValue]
    }

    func required(_ field: Field) throws(Rejection) -> JSONField {
        guard let value = self[field], !value.isNull else {
            throw Rejection(reason: .missingField, detail: "Required field \(field.name) is missing.")
        }
        return value
    }

    func requiredString(_ field: Field) throws(Rejection) -> String {
        let value = try required(field)
        guard case .string(let place) = value else { throw wrongType(field, "a string", value) }
        return JSONParser.text(of: place, in: input)
    }

    func requiredNumber(_ field: Field) throws(Rejection) -> Double {
        let value = try required(field)
        guard case .number(let number) = value else { throw wrongType(field, "a number", value) }
        return number
    }

    func optionalNumber(_ field: Field) throws(Rejection) -> Double? {
        guard let value = self[field], !value.isNull else { return nil }
        guard case .number(let number) = value else { throw wrongType(field, "a number", value) }
        return number
    }

    func optionalString(_ field: Field) throws(Rejection) -> String? {
        guard let value = self[field], !value.isNull else { return nil }
        guard case .string(let place) = value else { throw wrongType(field, "a string", value) }
        return JSONParser.text(of: place, in: input)
    }

    /// A required time: RFC 3339 text (read in place unless it has escapes) or epoch milliseconds.
    func timestamp(_ field: Field, nowMilliseconds now: Int64) throws(Rejection) -> Int64 {
        switch try required(field) {
        case .string(let place):
            let parsed = place.escaped ? RFC3339.parseMilliseconds(JSONParser.text(of: place, in: input))
                : RFC3339.parseMilliseconds(utf8: UnsafeBufferPointer(rebasing: input[place.bytes]))
            return try FieldRules.timestamp(rfc3339: parsed, text: JSONParser.text(of: place, in: input), nowMilliseconds: now)
        case .number(let number):
            return try FieldRules.timestamp(epochMilliseconds: number, nowMilliseconds: now)
        case let other:
            throw FieldRules.wrongTimestampType(other.typeName)
        }
    }

    private func wrongType(_ field: Field, _ expected: String, _ value: JSONField) -> Rejection {
        Rejection(reason: .wrongType, detail: "\(field.name) must be \(expected), not \(value.typeName).")
    }
}
