import FleetEngine
import FleetModel
import JSON

/// The rules every event field obeys, whichever format it came in (native JSON, a mapping,
/// a registry schema): the same checks and the same rejection reasons and sentences.
enum FieldRules {
    static func validateVehicleId(_ id: String) throws(Rejection) {
        // Nearly every id is short printable ASCII: one pass over the bytes settles it.
        // Over the contiguous bytes: `allSatisfy` on the `UTF8View` itself walks it generically.
        let utf8 = id.utf8
        if utf8.count >= 1, utf8.count <= LocationEventDecoder.maximumVehicleIdLength,
           utf8.withContiguousStorageIfAvailable({ $0.allSatisfy(isPlainIdByte) }) ?? utf8.allSatisfy(isPlainIdByte) { return }
        let length = id.unicodeScalars.count
        guard length >= 1, length <= LocationEventDecoder.maximumVehicleIdLength else {
            throw Rejection(reason: .badVehicleId, detail: "vehicle_id must be 1 to \(LocationEventDecoder.maximumVehicleIdLength) characters long, not \(length).")
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
    static func isPlainIdByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x21...0x7E: byte != UInt8(ascii: "/") && byte != UInt8(ascii: ":") && byte != UInt8(ascii: "\\")
            && byte != UInt8(ascii: "?") && byte != UInt8(ascii: "#")
        case 0x20: true
        default: false
        }
    }

    static func timestamp(_ value: JSONValue, nowMilliseconds now: Int64) throws(Rejection) -> Int64 {
        switch value {
        case .string(let text): try timestamp(rfc3339: RFC3339.parseMilliseconds(text), text: text, nowMilliseconds: now)
        case .number(let number): try timestamp(epochMilliseconds: number, nowMilliseconds: now)
        default: throw wrongTimestampType(value.typeName)
        }
    }

    /// A time given as text, `parsed` as RFC 3339 (nil: it is none); `text` only names it in the error.
    static func timestamp(rfc3339 parsed: Int64?, text: @autoclosure () -> String, nowMilliseconds now: Int64) throws(Rejection) -> Int64 {
        guard let parsed else {
            throw Rejection(reason: .badTimestamp, detail: "recorded_at \(JSONText.quoted(text())) is not an RFC 3339 timestamp with offset.")
        }
        return try notInFuture(parsed, nowMilliseconds: now)
    }

    /// A time given as a number: whole milliseconds since the epoch.
    static func timestamp(epochMilliseconds number: Double, nowMilliseconds now: Int64) throws(Rejection) -> Int64 {
        guard number.isFinite, number >= 0, number == number.rounded(), number < 1e15 else {
            throw Rejection(reason: .badTimestamp, detail: "recorded_at must be whole epoch milliseconds.")
        }
        return try notInFuture(Int64(number), nowMilliseconds: now)
    }

    static func wrongTimestampType(_ typeName: String) -> Rejection {
        Rejection(reason: .wrongType, detail: "recorded_at must be a string or a number, not \(typeName).")
    }

    /// A fix time at most 5 minutes ahead of the relay's clock.
    static func notInFuture(_ milliseconds: Int64, nowMilliseconds now: Int64) throws(Rejection) -> Int64 {
        guard milliseconds <= now + LocationEventDecoder.maximumFutureMilliseconds else {
            throw Rejection(reason: .futureTimestamp, detail: "recorded_at \(RFC3339.format(milliseconds: milliseconds)) is more than 5 minutes in the future.")
        }
        return milliseconds
    }

    static func check(_ value: Double, in range: ClosedRange<Double>, field: String) throws(Rejection) {
        guard value.isFinite, range.contains(value) else {
            throw Rejection(reason: .outOfRange, detail: "\(field) must be a finite number from \(range.lowerBound) to \(range.upperBound).")
        }
    }

    static func finite(_ value: Double, field: String) throws(Rejection) -> Double {
        guard value.isFinite else { throw Rejection(reason: .outOfRange, detail: "\(field) must be finite.") }
        return value
    }

    static func nonNegative(_ value: Double, field: String) throws(Rejection) -> Double {
        guard value.isFinite, value >= 0 else {
            throw Rejection(reason: .outOfRange, detail: "\(field) must be a finite number ≥ 0.")
        }
        return value
    }

    /// 0 ≤ h < 360, sent as the nearest whole degree (359.5 and above wraps to 0).
    static func heading(_ value: Double) throws(Rejection) -> Int {
        guard value.isFinite, value >= 0, value < 360 else {
            throw Rejection(reason: .outOfRange, detail: "heading must be at least 0 and below 360.")
        }
        return Int(value.rounded()) % 360
    }

    static func sensor(_ name: String) throws(Rejection) -> LocationSensor {
        guard let sensor = LocationSensor(rawValue: name) else {
            let names = LocationSensor.allCases.map(\.rawValue).joined(separator: ", ")
            throw Rejection(reason: .outOfRange, detail: "sensor \(JSONText.quoted(name)) is not one of \(names).")
        }
        return sensor
    }

    static func kind(_ name: String) throws(Rejection) -> VehicleKind {
        guard let kind = VehicleKind(rawValue: name) else {
            throw Rejection(reason: .unknownKind, detail: "kind \(JSONText.quoted(name)) is neither vehicle nor delivery_vehicle.")
        }
        return kind
    }

    static func printable(_ key: [UInt8]) -> String {
        guard let text = String(validating: key.prefix(80), as: UTF8.self) else { return "(\(key.count) non-UTF-8 bytes)" }
        return JSONText.quoted(text)
    }
}
