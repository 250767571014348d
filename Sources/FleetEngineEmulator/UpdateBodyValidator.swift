import FleetEngine
import JSON

/// Validates an update body as Fleet Engine would (400 on failure) and extracts
/// the time of its `lastLocation`.
///
/// The body is walked once with `JSONReader`: a location's members are noted as they pass and
/// judged once the document is read whole, in a fixed order of checks, so that a body with
/// several faults gets the same message whatever the order of its members, a malformed body is
/// refused as such before any other fault, and a repeated member counts as its last occurrence.
/// No dictionary is built for a location: a hundred past locations cost a benchmark's
/// emulator a third of its CPU when they were.
enum UpdateBodyValidator {
    static let forbiddenFields = ["serverTime", "horizontalAccuracy", "speedKmph", "roadSnapped"]
    static let numericFields = ["speed", "altitude", "supplementalLocationAccuracy", "latlngAccuracy"]

    struct Invalid: Error { let message: String }

    struct ValidUpdate {
        let lastLocation: JSONValue
        let locationTimeMilliseconds: Int64
        /// Times of the `pastLocations`, in the order sent.
        let pastLocationTimes: [Int64]
    }

    static func validate(body: [UInt8], updateMask: String?) throws(Invalid) -> ValidUpdate {
        let mask = Set((updateMask ?? "").split(separator: ",").map { $0.trimmingSpaces() })
        guard mask.contains("last_location") || mask.contains("lastLocation") else {
            throw Invalid(message: "updateMask must name last_location.")
        }
        let document: UpdateDocument
        do {
            document = try JSONReader.read(body) { reader in try UpdateDocument(&reader) }
        } catch {
            throw Invalid(message: "Body is not a JSON object.")
        }
        guard let last = document.lastLocation else {
            throw Invalid(message: "lastLocation is required.")
        }
        let time = try last.facts.time(field: { "lastLocation" })
        var pastTimes: [Int64] = []
        if let past = document.pastLocations {
            guard mask.contains("past_locations") || mask.contains("pastLocations") else {
                throw Invalid(message: "pastLocations is outside updateMask and would be ignored.")
            }
            guard let elements = past else { throw Invalid(message: "pastLocations must be an array.") }
            pastTimes.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() {
                pastTimes.append(try element.time(field: { "pastLocations[\(index)]" }))
            }
        }
        // Only the last location is kept (the vehicle's representation shows it): its bytes alone
        // are parsed into a value.
        guard let lastLocation = try? JSONParser.parse(body[last.bytes]) else {
            throw Invalid(message: "Body is not a JSON object.")
        }
        return ValidUpdate(lastLocation: lastLocation, locationTimeMilliseconds: time, pastLocationTimes: pastTimes)
    }
}

/// An update body's members that matter, as read: the last occurrence of each counts.
private struct UpdateDocument {
    static let fields = JSONFieldNames(["lastLocation", "pastLocations"])

    /// `lastLocation` when it is an object: its facts and where its bytes are.
    var lastLocation: (facts: LocationFacts, bytes: Range<Int>)?
    /// Absent: nil; present but not an array: `.some(nil)`; else each element's facts.
    var pastLocations: [LocationFacts?]??

    init(_ reader: inout JSONReader) throws {
        guard try reader.beginObject() else { throw NotAnObject() }
        while let member = try reader.nextMember(in: Self.fields) {
            switch member {
            case .field(0):
                let start = reader.offset
                lastLocation = try LocationFacts(&reader).map { ($0, start..<reader.offset) }
            case .field(1):
                pastLocations = .some(try Self.locations(&reader))
            default:
                try reader.skipValue()
            }
        }
    }

    private static func locations(_ reader: inout JSONReader) throws -> [LocationFacts?]? {
        guard try reader.beginArray() else {
            try reader.skipValue()
            return nil
        }
        var locations: [LocationFacts?] = []
        while try reader.nextElement() { locations.append(try LocationFacts(&reader)) }
        return locations
    }

    /// The body's top level is not an object (reported as a malformed body).
    struct NotAnObject: Error {}
}

/// One `VehicleLocation`'s members as they were read; judged by `time(field:)`.
private struct LocationFacts {
    /// Read by position in `take`; the forbidden and the numeric fields follow them.
    static let checkedFields = ["location", "supplementalLocation", "updateTime", "supplementalLocationTime", "heading"]
    static let fields = JSONFieldNames(checkedFields + UpdateBodyValidator.forbiddenFields + UpdateBodyValidator.numericFields)
    static let pointFields = JSONFieldNames(["latitude", "longitude"])
    static let firstForbidden = checkedFields.count
    static let firstNumeric = firstForbidden + UpdateBodyValidator.forbiddenFields.count

    /// Whether `location` / `supplementalLocation` hold a LatLng in range; nil when absent.
    var point: Bool?
    var supplementalPoint: Bool?
    /// The times, when present and RFC 3339; nil when absent or not.
    var updateTime: Int64?
    var supplementalLocationTime: Int64?
    /// Present, and whether it is an integer from 0 to 359.
    var heading: Bool?
    /// Bit i: the i-th of the forbidden fields is present (bits, not an array: no allocation per location).
    var forbiddenPresent: UInt8 = 0
    /// Bit i: the i-th of the numeric fields is present with a value that is not a number.
    var numericNotNumber: UInt8 = 0

    /// Nil (the value passed over) when the value is not an object.
    init?(_ reader: inout JSONReader) throws {
        guard try reader.beginObject() else {
            try reader.skipValue()
            return nil
        }
        while let member = try reader.nextMember(in: Self.fields) {
            guard case .field(let index) = member else {
                try reader.skipValue()
                continue
            }
            try take(index, &reader)
        }
    }

    /// Notes the member at `index`; a value not of the kind wanted is checked and passed over.
    private mutating func take(_ index: Int, _ reader: inout JSONReader) throws {
        let start = reader.offset
        switch index {
        case 0: point = try Self.isLatLng(&reader)
        case 1: supplementalPoint = try Self.isLatLng(&reader)
        case 2: updateTime = try Self.time(&reader)
        case 3: supplementalLocationTime = try Self.time(&reader)
        case 4:
            let degrees = try reader.readNumber()
            heading = degrees.map { $0 == $0.rounded() && (0...359).contains($0) } ?? false
        case Self.firstForbidden..<Self.firstNumeric:
            forbiddenPresent |= 1 << (index - Self.firstForbidden)
        default:
            let bit: UInt8 = 1 << (index - Self.firstNumeric)
            numericNotNumber = try reader.readNumber() == nil ? numericNotNumber | bit : numericNotNumber & ~bit
        }
        if reader.offset == start { try reader.skipValue() }
    }

    private static func isLatLng(_ reader: inout JSONReader) throws -> Bool {
        guard try reader.beginObject() else { return false }
        var latitude: Double?
        var longitude: Double?
        while let member = try reader.nextMember(in: pointFields) {
            let start = reader.offset
            switch member {
            case .field(0): latitude = try reader.readNumber()
            case .field(1): longitude = try reader.readNumber()
            case .field, .other: break
            }
            if reader.offset == start { try reader.skipValue() }
        }
        guard let latitude, let longitude else { return false }
        return (-90...90).contains(latitude) && (-180...180).contains(longitude)
    }

    private static func time(_ reader: inout JSONReader) throws -> Int64? {
        try reader.readString().flatMap(RFC3339.parseMilliseconds)
    }

    /// The location's time, after its checks in Fleet Engine's order; `field` names it in errors.
    func time(field: () -> String) throws(UpdateBodyValidator.Invalid) -> Int64 {
        typealias Invalid = UpdateBodyValidator.Invalid
        if forbiddenPresent != 0 {
            let forbidden = UpdateBodyValidator.forbiddenFields[forbiddenPresent.trailingZeroBitCount]
            throw Invalid(message: "\(field()).\(forbidden) is output-only or deprecated.")
        }
        let supplemental = supplementalPoint != nil
        let (pointField, timeField) = supplemental ? ("supplementalLocation", "supplementalLocationTime") : ("location", "updateTime")
        guard (supplemental ? supplementalPoint : point) == true else {
            throw Invalid(message: "\(field()).\(pointField) must be a valid LatLng.")
        }
        guard let time = supplemental ? supplementalLocationTime : updateTime else {
            throw Invalid(message: "\(field()).\(timeField) must be an RFC 3339 timestamp.")
        }
        if heading == false { throw Invalid(message: "\(field()).heading must be an integer from 0 to 359.") }
        if numericNotNumber != 0 {
            let numeric = UpdateBodyValidator.numericFields[numericNotNumber.trailingZeroBitCount]
            throw Invalid(message: "\(field()).\(numeric) must be a number.")
        }
        return time
    }
}

extension Optional where Wrapped == LocationFacts {
    /// A `pastLocations` element that is not an object fails as such.
    fileprivate func time(field: () -> String) throws(UpdateBodyValidator.Invalid) -> Int64 {
        guard let facts = self else { throw UpdateBodyValidator.Invalid(message: "\(field()) must be an object.") }
        return try facts.time(field: field)
    }
}

extension Substring {
    fileprivate func trimmingSpaces() -> String {
        String(self.drop { $0 == " " })
    }
}
