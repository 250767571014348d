import FleetEngine
import FleetModel
import Foundation
import JSON

extension InputMapping {
    /// What a mapping made of one record.
    enum Applied {
        case update(LocationUpdate)
        /// The skip rule (its text) that left the record out.
        case skipped(String)
    }

    /// Skip rules on the whole document, then the envelope, then every field by its rules.
    /// A rejection's detail names the path the value came from.
    func apply(to document: JSONValue, record: InputRecord, defaultKind: VehicleKind,
               nowMilliseconds: Int64) throws(Rejection) -> Applied {
        guard case .object = document else {
            throw Rejection(reason: .notObject, detail: "The value is a JSON \(document.typeName), not an object.")
        }
        if let rule = skipRules.first(where: { $0.matches(document) }) { return .skipped(rule.description) }
        let event = try unwrap(document)
        let context = Context(document: event, record: record)
        let vehicleId = try identifier(context)
        if keyMustMatch, let key = record.key, !key.isUTF8(of: vehicleId) {
            throw Rejection(reason: .keyMismatch, detail: "The record key \(FieldRules.printable(key)) differs from vehicle_id \(JSONText.quoted(vehicleId)).")
        }
        let (latitude, longitude) = try position(context)
        var fix = LocationFix(latitude: latitude, longitude: longitude,
                              recordedAtMilliseconds: try recordedAt(context, nowMilliseconds: nowMilliseconds))
        if let (heading, origin) = try number(.heading, context) {
            fix.heading = try at(origin) { () throws(Rejection) in try FieldRules.heading(heading) }
        }
        if let (speed, origin) = try number(.speed, context) {
            let metersPerSecond = speed * (sources[.speed]?.speedUnit ?? .metersPerSecond).metersPerSecond
            fix.speedMetersPerSecond = try at(origin) { () throws(Rejection) in try FieldRules.nonNegative(metersPerSecond, field: "speed_mps") }
        }
        if let (accuracy, origin) = try number(.accuracy, context) {
            fix.accuracyMeters = try at(origin) { () throws(Rejection) in try FieldRules.nonNegative(accuracy, field: "accuracy_m") }
        }
        if let (altitude, origin) = try number(.altitude, context) {
            fix.altitudeMeters = try at(origin) { () throws(Rejection) in try FieldRules.finite(altitude, field: "altitude_m") }
        }
        if let (sensor, origin) = try text(.sensor, context) {
            fix.sensor = try at(origin) { () throws(Rejection) in try FieldRules.sensor(sensor) }
        }
        var kind = defaultKind
        if let (name, origin) = try text(.kind, context) {
            kind = try at(origin) { () throws(Rejection) in try FieldRules.kind(name) }
        }
        return .update(LocationUpdate(vehicle: VehicleIdentity(kind: kind, id: vehicleId), fix: fix))
    }

    struct Context {
        let document: JSONValue
        let record: InputRecord
    }

    // MARK: Fields

    private func unwrap(_ document: JSONValue) throws(Rejection) -> JSONValue {
        guard !envelope.isEmpty else { return document }
        for path in envelope {
            if let inner = path.value(in: document), case .object = inner {
                return readsConnectSchema ? ConnectSchema.normalize(inner, at: path, in: document) : inner
            }
        }
        let paths = envelope.map(\.description).joined(separator: " or ")
        throw Rejection(reason: .missingField, detail: "The envelope \(paths) holds no object.")
    }

    private func identifier(_ context: Context) throws(Rejection) -> String {
        guard let (value, origin) = try raw(.vehicleId, context) else { throw missing(.vehicleId) }
        var id: String
        let source = sources[.vehicleId]!
        switch value {
        case .string(let text): id = text
        case .number(let number) where source.converts && number == number.rounded() && abs(number) < 9_007_199_254_740_992:
            id = String(Int64(number))
        default:
            throw Rejection(reason: .wrongType, detail: "at \(origin): vehicle_id must be a string, not \(value.typeName)\(source.converts ? "" : " (convert: true accepts whole numbers)").")
        }
        if let prefix = source.stripPrefix, id.hasPrefix(prefix) { id.removeFirst(prefix.count) }
        for (target, replacement) in source.replacements { id = id.replacingOccurrences(of: target, with: replacement) }
        let edited = id
        try at(origin) { () throws(Rejection) in try FieldRules.validateVehicleId(edited) }
        return id
    }

    private func position(_ context: Context) throws(Rejection) -> (Double, Double) {
        if let coordinates {
            guard let value = coordinates.path.value(in: context.document) else {
                throw Rejection(reason: .missingField, detail: "Required coordinates are missing at \(coordinates.path).")
            }
            guard case .array(let pair) = value, pair.count >= 2, let first = pair[0].numberValue, let second = pair[1].numberValue else {
                throw Rejection(reason: .wrongType, detail: "at \(coordinates.path): coordinates must be an array of at least two numbers.")
            }
            let (latitude, longitude) = coordinates.longitudeFirst ? (second, first) : (first, second)
            try at(.path(coordinates.path)) { () throws(Rejection) in
                try FieldRules.check(latitude, in: -90...90, field: "lat")
                try FieldRules.check(longitude, in: -180...180, field: "lng")
            }
            return (latitude, longitude)
        }
        guard let (latitude, latitudeOrigin) = try number(.latitude, context) else { throw missing(.latitude) }
        guard let (longitude, longitudeOrigin) = try number(.longitude, context) else { throw missing(.longitude) }
        try at(latitudeOrigin) { () throws(Rejection) in try FieldRules.check(latitude, in: -90...90, field: "lat") }
        try at(longitudeOrigin) { () throws(Rejection) in try FieldRules.check(longitude, in: -180...180, field: "lng") }
        return (latitude, longitude)
    }

    private func recordedAt(_ context: Context, nowMilliseconds: Int64) throws(Rejection) -> Int64 {
        guard let (value, origin) = try raw(.recordedAt, context) else { throw missing(.recordedAt) }
        let format: TimeFormat = origin == .timestamp ? .epoch(unitsPerSecond: 1000) : sources[.recordedAt]!.timeFormat
        return try at(origin) { () throws(Rejection) in
            try FieldRules.notInFuture(try Self.time(value, format: format, nowMilliseconds: nowMilliseconds),
                                       nowMilliseconds: nowMilliseconds)
        }
    }

    static func time(_ value: JSONValue, format: TimeFormat, nowMilliseconds: Int64) throws(Rejection) -> Int64 {
        switch format {
        case .automatic:
            return try FieldRules.timestamp(value, nowMilliseconds: nowMilliseconds)
        case .rfc3339:
            guard case .string(let text) = value else { throw wrongTimeType(value, "an RFC 3339 string") }
            guard let milliseconds = RFC3339.parseMilliseconds(text) ?? RFC3339.parseMilliseconds(Self.colonInOffset(text)) else {
                throw Rejection(reason: .badTimestamp, detail: "recorded_at \(JSONText.quoted(text)) is not an RFC 3339 timestamp with offset.")
            }
            return milliseconds
        case .local(let zone):
            guard case .string(let text) = value else { throw wrongTimeType(value, "a date and time string") }
            guard let local = RFC3339.parseLocalMilliseconds(text) else {
                throw Rejection(reason: .badTimestamp, detail: "recorded_at \(JSONText.quoted(text)) is not an ISO 8601 date and time without offset.")
            }
            return local - zoneOffsetMilliseconds(zone, localMilliseconds: local)
        case .epoch(let unitsPerSecond):
            return try epoch(value, unitsPerSecond: unitsPerSecond)
        }
    }

    /// `…+0100` as `…+01:00`: Java's and others' ISO 8601 without the colon RFC 3339 wants.
    private static func colonInOffset(_ text: String) -> String {
        let utf8 = Array(text.utf8)
        guard utf8.count > 5, utf8[utf8.count - 5] == UInt8(ascii: "+") || utf8[utf8.count - 5] == UInt8(ascii: "-"),
              utf8.suffix(4).allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return text }
        return String(text.dropLast(2)) + ":" + String(text.suffix(2))
    }

    /// The zone's offset at that local time (daylight saving included).
    private static func zoneOffsetMilliseconds(_ zone: TimeZone, localMilliseconds: Int64) -> Int64 {
        let guess = Date(timeIntervalSince1970: Double(localMilliseconds) / 1000)
        let first = zone.secondsFromGMT(for: guess)
        let second = zone.secondsFromGMT(for: guess.addingTimeInterval(-Double(first)))
        return Int64(second) * 1000
    }

    private static func epoch(_ value: JSONValue, unitsPerSecond: Int64) throws(Rejection) -> Int64 {
        let bad = Rejection(reason: .badTimestamp, detail: "recorded_at must be epoch time (\(unitName(unitsPerSecond))), not \(value.serialized().prefix(40)).")
        let milliseconds: Int64
        switch value {
        case .string(let text):
            if let whole = Int64(text) {
                milliseconds = scaled(whole, unitsPerSecond: unitsPerSecond)
            } else if let number = Double(text), number.isFinite {
                milliseconds = try scaled(number, unitsPerSecond: unitsPerSecond, or: bad)
            } else {
                throw bad
            }
        case .number(let number):
            milliseconds = try scaled(number, unitsPerSecond: unitsPerSecond, or: bad)
        default:
            throw wrongTimeType(value, "epoch time")
        }
        guard milliseconds >= 0, milliseconds < 1_000_000_000_000_000 else { throw bad }
        return milliseconds
    }

    private static func scaled(_ whole: Int64, unitsPerSecond: Int64) -> Int64 {
        unitsPerSecond >= 1000 ? whole / (unitsPerSecond / 1000) : whole.multipliedReportingOverflow(by: 1000 / unitsPerSecond).partialValue
    }

    private static func scaled(_ number: Double, unitsPerSecond: Int64, or bad: Rejection) throws(Rejection) -> Int64 {
        guard number.isFinite, abs(number) < 1e19 else { throw bad }
        // Rounded to the nearest millisecond from seconds (1.123 s is not 1122.999… ms); finer units are truncated.
        let milliseconds = unitsPerSecond == 1 ? (number * 1000).rounded() : (number * 1000 / Double(unitsPerSecond)).rounded(.down)
        return Int64(milliseconds)
    }

    private static func unitName(_ unitsPerSecond: Int64) -> String {
        switch unitsPerSecond {
        case 1: "seconds"
        case 1000: "milliseconds"
        case 1_000_000: "microseconds"
        default: "nanoseconds"
        }
    }

    private static func wrongTimeType(_ value: JSONValue, _ expected: String) -> Rejection {
        Rejection(reason: .wrongType, detail: "recorded_at must be \(expected), not \(value.typeName).")
    }

    // MARK: Values

    /// The field's number: JSON numbers, or numeric text as some vendors send.
    private func number(_ field: Field, _ context: Context) throws(Rejection) -> (Double, Origin)? {
        guard let (value, origin) = try raw(field, context) else { return nil }
        let converts = sources[field]?.converts ?? false
        switch value {
        case .number(let number): return (number, origin)
        case .string(let text) where converts:
            if let number = Double(text) { return (number, origin) }
            fallthrough
        default:
            throw Rejection(reason: .wrongType, detail: "at \(origin): \(field.rawValue) must be a number, not \(value.typeName)\(converts ? "" : " (convert: true accepts numeric text)").")
        }
    }

    private func text(_ field: Field, _ context: Context) throws(Rejection) -> (String, Origin)? {
        guard let (value, origin) = try raw(field, context) else { return nil }
        guard case .string(let text) = value else {
            throw Rejection(reason: .wrongType, detail: "at \(origin): \(field.rawValue) must be a string, not \(value.typeName).")
        }
        return (text, origin)
    }

    /// The first present origin's value (or the default), through the value map.
    private func raw(_ field: Field, _ context: Context) throws(Rejection) -> (JSONValue, Origin)? {
        guard let source = sources[field] else { return nil }
        // A value the map turns into null counts as absent (a vendor's "unknown").
        for origin in source.origins {
            if let value = try Self.value(of: origin, context) {
                let mapped = source.mapped(value)
                return mapped == .null ? fallback(source) : (mapped, origin)
            }
        }
        return fallback(source)
    }

    private func fallback(_ source: Source) -> (JSONValue, Origin)? {
        source.fallback.map { (source.mapped($0), .constant($0)) }
    }

    private static func value(of origin: Origin, _ context: Context) throws(Rejection) -> JSONValue? {
        switch origin {
        case .path(let path):
            return path.value(in: context.document)
        case .constant(let value):
            return value
        case .timestamp:
            return context.record.timestampMilliseconds.map { .number(Double($0)) }
        case .key:
            guard let key = context.record.key, !key.isEmpty else { return nil }
            return .string(try utf8(key, origin))
        case .header(let name):
            guard let header = context.record.headers.last(where: { $0.name == name }) else { return nil }
            return .string(try utf8(header.value, origin))
        }
    }

    private static func utf8(_ bytes: [UInt8], _ origin: Origin) throws(Rejection) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw Rejection(reason: .wrongType, detail: "\(origin) is not UTF-8 text.")
        }
        return text
    }

    private func missing(_ field: Field) -> Rejection {
        let origins = sources[field]?.origins.map(\.description).joined(separator: " or ") ?? "nowhere (not mapped)"
        return Rejection(reason: .missingField, detail: "Required field \(field.rawValue) is missing at \(origins).")
    }

    /// Runs a field rule; its rejection names where the value came from.
    private func at<Value>(_ origin: Origin, _ rule: () throws(Rejection) -> Value) throws(Rejection) -> Value {
        do {
            return try rule()
        } catch {
            guard case .constant = origin else { throw Rejection(reason: error.reason, detail: "at \(origin): \(error.detail)") }
            throw error
        }
    }
}

extension InputMapping.Source {
    func mapped(_ value: JSONValue) -> JSONValue {
        guard !valueMap.isEmpty else { return value }
        let key: String
        switch value {
        case .string(let text): key = text
        case .number(let number): key = JSONText.number(number)
        case .bool(let flag): key = flag ? "true" : "false"
        default: return value
        }
        return valueMap[key] ?? value
    }
}

extension InputMapping.SkipRule {
    func matches(_ document: JSONValue) -> Bool {
        switch self {
        case .equals(let path, let value): path.value(in: document) == value
        case .notEquals(let path, let value): path.value(in: document) != value
        case .oneOf(let path, let values): path.value(in: document).map(values.contains) ?? false
        case .absent(let path): path.value(in: document) == nil
        case .emptyValue: false  // decided before the value is decoded
        }
    }
}
