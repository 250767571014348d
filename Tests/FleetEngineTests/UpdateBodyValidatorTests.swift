import FleetEngine
@testable import FleetEngineEmulator
import JSON
import Testing

/// The emulator judges an update body as Fleet Engine does. Its reader walks the body once;
/// the reference here judges the parsed document, member by member, in Fleet Engine's order.
@Suite struct UpdateBodyValidatorTests {
    enum Verdict: Equatable {
        case valid(time: Int64, pastTimes: [Int64], lastLocation: JSONValue)
        case invalid(String)
    }

    /// The checks over the whole parsed document: what the emulator is held to.
    static func reference(body: [UInt8], mask: Set<String>) -> Verdict {
        guard mask.contains("last_location") || mask.contains("lastLocation") else { return .invalid("updateMask must name last_location.") }
        guard let document = try? JSONParser.parse(body), case .object = document else { return .invalid("Body is not a JSON object.") }
        guard let last = document["lastLocation"], case .object = last else { return .invalid("lastLocation is required.") }
        struct Refusal: Error { let message: String }
        func location(_ value: JSONValue, _ field: String) -> Result<Int64, Refusal> {
            guard let members = value.objectValue else { return .failure(Refusal(message: "\(field) must be an object.")) }
            for forbidden in ["serverTime", "horizontalAccuracy", "speedKmph", "roadSnapped"] where members[forbidden] != nil {
                return .failure(Refusal(message: "\(field).\(forbidden) is output-only or deprecated."))
            }
            let (pointField, timeField) = members["supplementalLocation"] != nil
                ? ("supplementalLocation", "supplementalLocationTime") : ("location", "updateTime")
            guard let point = members[pointField], let latitude = point["latitude"]?.numberValue,
                  let longitude = point["longitude"]?.numberValue, (-90...90).contains(latitude), (-180...180).contains(longitude)
            else { return .failure(Refusal(message: "\(field).\(pointField) must be a valid LatLng.")) }
            guard let text = members[timeField]?.stringValue, let time = RFC3339.parseMilliseconds(text) else {
                return .failure(Refusal(message: "\(field).\(timeField) must be an RFC 3339 timestamp."))
            }
            if let heading = members["heading"] {
                guard let degrees = heading.numberValue, degrees == degrees.rounded(), (0...359).contains(degrees) else {
                    return .failure(Refusal(message: "\(field).heading must be an integer from 0 to 359."))
                }
            }
            for numeric in ["speed", "altitude", "supplementalLocationAccuracy", "latlngAccuracy"] where members[numeric] != nil {
                if members[numeric]?.numberValue == nil { return .failure(Refusal(message: "\(field).\(numeric) must be a number.")) }
            }
            return .success(time)
        }
        let time: Int64
        switch location(last, "lastLocation") {
        case .success(let value): time = value
        case .failure(let refusal): return .invalid(refusal.message)
        }
        var pastTimes: [Int64] = []
        if let past = document["pastLocations"] {
            guard mask.contains("past_locations") || mask.contains("pastLocations") else {
                return .invalid("pastLocations is outside updateMask and would be ignored.")
            }
            guard let elements = past.arrayValue else { return .invalid("pastLocations must be an array.") }
            for (index, element) in elements.enumerated() {
                switch location(element, "pastLocations[\(index)]") {
                case .success(let value): pastTimes.append(value)
                case .failure(let refusal): return .invalid(refusal.message)
                }
            }
        }
        return .valid(time: time, pastTimes: pastTimes, lastLocation: last)
    }

    static func verdict(body: [UInt8], mask: String) -> Verdict {
        do {
            let valid = try UpdateBodyValidator.validate(body: body, updateMask: mask)
            return .valid(time: valid.locationTimeMilliseconds, pastTimes: valid.pastLocationTimes, lastLocation: valid.lastLocation)
        } catch {
            return .invalid(error.message)
        }
    }

    /// A location's members in random order, each mostly right and sometimes wrong in one of
    /// the ways Fleet Engine names, repeated now and then with another value (the last counts).
    static func location(using random: inout some RandomNumberGenerator) -> String {
        /// Mostly `usual`; one time in `rarely` another of the choices (absent when nil).
        func value(_ usual: String?, else choices: [String?], rarely: Int = 12) -> String? {
            Int.random(in: 0..<rarely, using: &random) == 0 ? choices.randomElement(using: &random)! : usual
        }
        let good = #"{"latitude": 37.5, "longitude": -122.25}"#
        let points: [String?] = [nil, #"{"latitude": 95, "longitude": 1}"#, #"{"longitude": 1, "latitude": -90}"#,
                                 #"{"latitude": 1}"#, #"{"latitude": "1", "longitude": 2}"#, "[1, 2]", "null",
                                 #"{"latitude": 1, "longitude": 2, "x": {"y": []}}"#]
        let times: [String?] = [nil, #""2026-11-28T16:00:01Z""#, #""2026-11-28T18:00:02+02:00""#, #""yesterday""#,
                                "1764345600000", "null"]
        let forbidden = ["serverTime", "horizontalAccuracy", "speedKmph", "roadSnapped"].randomElement(using: &random)!
        let candidates: [(String, String?)] = [
            ("location", value(good, else: points)),
            ("supplementalLocation", value(nil, else: points + [good], rarely: 8)),
            ("updateTime", value(#""2026-11-28T16:00:00.123Z""#, else: times)),
            ("supplementalLocationTime", value(nil, else: times, rarely: 6)),
            ("heading", value("90", else: [nil, "0", "359", "360", "90.5", "-1", #""north""#], rarely: 4)),
            ("speed", value("12.5", else: [nil, #""fast""#], rarely: 6)),
            ("altitude", value(nil, else: ["-3", "null"], rarely: 6)),
            ("latlngAccuracy", value("4.2", else: [nil, "[]"], rarely: 6)),
            ("supplementalLocationAccuracy", value(nil, else: ["1"], rarely: 6)),
            ("locationSensor", value(#""GPS""#, else: [nil])),
            ("raw", value(nil, else: [#"{"nested": [1, {"deep": null}], "ok": true}"#], rarely: 4)),
            (forbidden, value(nil, else: ["1"], rarely: 30)),
        ]
        var members: [(String, String)] = []
        for case (let name, let member?) in candidates {
            members.append((name, member))
            if Int.random(in: 0..<30, using: &random) == 0 { members.append((name, (points + times).randomElement(using: &random)! ?? "0")) }
        }
        members.shuffle(using: &random)
        return "{" + members.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}"
    }

    /// Random bodies, valid and faulty, some cut short or with trailing bytes: the emulator's
    /// verdict (the message, or the times and the last location kept) is the reference's.
    @Test func verdictsAreThoseOfTheChecksOverTheParsedDocument() {
        var random = SystemRandomNumberGenerator()
        var valid = 0
        var refusals: Set<String> = []
        for _ in 0..<3_000 {
            var members: [String] = []
            switch Int.random(in: 0..<20, using: &random) {
            case 0: break
            case 1: members.append(#""lastLocation": [1]"#)
            default: members.append("\"lastLocation\": \(Self.location(using: &random))")
            }
            switch Int.random(in: 0..<6, using: &random) {
            case 0: break
            case 1: members.append(#""pastLocations": {"a": 1}"#)
            case 2: members.append(#""pastLocations": null"#)
            default:
                let past = (0..<Int.random(in: 0...4, using: &random)).map { _ in
                    Int.random(in: 0..<40, using: &random) == 0 ? "7" : Self.location(using: &random)
                }
                members.append("\"pastLocations\": [\(past.joined(separator: ", "))]")
            }
            if Bool.random(using: &random) { members.append(#""name": "providers/p/vehicles/v""#) }
            members.shuffle(using: &random)
            var text = "{" + members.joined(separator: ", ") + "}"
            switch Int.random(in: 0..<30, using: &random) {
            case 0: text = String(text.dropLast(Int.random(in: 1...min(5, text.count), using: &random)))
            case 1: text += " x"
            case 2: text = "[" + text + "]"
            default: break
            }
            let mask = ["last_location", "last_location,past_locations", "lastLocation, pastLocations",
                        "last_location,past_locations", "past_locations"].randomElement(using: &random)!
            let body = Array(text.utf8)
            let expected = Self.reference(body: body, mask: Set(mask.split(separator: ",").map { String($0.drop { $0 == " " }) }))
            #expect(Self.verdict(body: body, mask: mask) == expected, "\(mask): \(text)")
            switch expected {
            case .valid: valid += 1
            case .invalid(let message): refusals.insert(String(message.drop { $0 != "." && $0 != " " }))
            }
        }
        #expect(valid > 150, "the bodies cover valid updates too (\(valid))")
        #expect(refusals.count >= 15, "the bodies cover every kind of refusal: \(refusals.sorted())")
    }
}
