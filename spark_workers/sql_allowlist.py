"""What client SQL may use: operators, functions, hints, and the bounds on what may generate
data from a constant. Anything not listed here is refused by `sql_guard`.

Functions are allowed twice over: by SQL *name* in the parsed plan (so a refused function is
named in the error, and nothing unlisted reaches the analyzer, which evaluates some constant
expressions: `IDENTIFIER(...)`, `LIMIT`, `VALUES` rows, schemas), and by *resolved class* in
the analyzed plan, whatever the spelling (`IDENTIFIER('f')(...)`, `system.builtin.f`, a bare
`current_user`, a lambda, a subquery or a CTE). The class sets were generated from the
documented examples of the allowed functions and a corpus of query syntax on Spark 4.3, then
reviewed; `tests/security/test_allowlist.py` re-checks them against the running Spark.

Left out on purpose: reflection (`reflect`, `java_method`, `try_reflect`), file names
(`input_file_*`), who/where the worker is (`current_user`, `user`, `session_user`,
`current_catalog`/`_database`/`_schema`/`_path`, `version`, `spark_partition_id`), errors on
demand (`raise_error`, `assert_true`), XML (`xpath*`, `from_xml`...: a second parser over
client text), Avro/Protobuf (descriptor files), `format_string`/`printf` (a width in the
format string allocates), streaming windows (`window`, `session_window`: a window/slide ratio
expands every row), sketches, variants, vectors, geo, bitmaps, AES/HMAC, TIME-type functions
(the type is not enabled), and user-defined functions of any kind.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# -- functions, by SQL name (parsed plan) -------------------------------------------------

ALLOWED_FUNCTIONS = _words(
    # aggregate (collect_list/listagg grow with the data, like a sort: Spark's own limits)
    """any any_value approx_count_distinct approx_percentile array_agg avg bit_and bit_or
    bit_xor bool_and bool_or collect_list collect_set corr count count_if covar_pop covar_samp
    every first first_value grouping grouping_id histogram_numeric kurtosis last last_value
    listagg max max_by mean median min min_by mode percentile percentile_approx
    percentile_cont percentile_disc regr_avgx regr_avgy regr_count regr_intercept regr_r2
    regr_slope regr_sxx regr_sxy regr_syy skewness some std stddev stddev_pop stddev_samp
    string_agg sum try_avg try_sum var_pop var_samp variance"""
    # window
    """ cume_dist dense_rank lag lead nth_value ntile percent_rank rank row_number"""
    # date and time
    """ add_months convert_timezone curdate current_date current_timestamp current_timezone
    date_add date_diff date_format date_from_unix_date date_part date_sub date_trunc dateadd
    datediff datepart day dayname dayofmonth dayofweek dayofyear extract from_unixtime
    from_utc_timestamp hour last_day localtimestamp make_date make_dt_interval make_interval
    make_timestamp make_timestamp_ltz make_timestamp_ntz make_ym_interval minute month
    monthname months_between next_day now quarter second time_bucket timestamp_micros
    timestamp_millis timestamp_nanos timestamp_seconds to_date to_timestamp to_timestamp_ltz
    to_timestamp_ntz to_unix_timestamp to_utc_timestamp trunc try_make_interval
    try_make_timestamp try_make_timestamp_ltz try_make_timestamp_ntz try_to_date
    try_to_timestamp unix_date unix_micros unix_millis unix_nanos unix_seconds unix_timestamp
    weekday weekofyear year"""
    # arithmetic and math
    """ % * + - / abs acos acosh asin asinh atan atan2 atanh bin bround cbrt ceil ceiling conv
    cos cosh cot csc degrees div e exp expm1 factorial floor greatest hex hypot least ln log
    log10 log1p log2 mod negative pi pmod positive pow power radians rand randn random rint
    round sec sign signum sin sinh sqrt tan tanh try_add try_divide try_mod try_multiply
    try_subtract unhex uniform width_bucket"""
    # bitwise, comparison, logic, conditional, casts
    """ & << >> >>> ^ | ~ bit_count bit_get getbit shiftleft shiftright shiftrightunsigned
    ! < <= <=> = == > >= and equal_null ilike in isnan isnotnull isnull like not or regexp
    regexp_like rlike between coalesce if ifnull nanvl nullif nullifzero nvl nvl2 when
    zeroifnull bigint binary boolean cast date decimal double float int smallint string
    timestamp tinyint"""
    # string, hash
    """ ascii base64 bit_length btrim char char_length character_length chr collate collation
    concat_ws contains decode elt encode endswith find_in_set format_number from_base32
    initcap instr is_valid_utf8 jaro_winkler_similarity lcase left len length levenshtein
    locate lower lpad ltrim luhn_check make_valid_utf8 mask octet_length overlay position
    quote randstr regexp_count regexp_extract regexp_extract_all regexp_instr regexp_replace
    regexp_substr repeat replace right rpad rtrim sentences soundex space split split_part
    startswith substr substring substring_index to_base32 to_binary to_char to_number
    to_varchar translate trim try_to_binary try_to_number try_validate_utf8 ucase unbase64
    upper validate_utf8 crc32 hash md5 sha sha1 sha2 xxhash64"""
    # arrays, maps, structs, higher-order functions, generators
    """ array array_append array_compact array_contains array_distinct array_except
    array_insert array_intersect array_join array_max array_min array_position array_prepend
    array_remove array_repeat array_size array_union arrays_overlap arrays_zip cardinality
    concat element_at flatten get reverse sequence shuffle size slice sort_array
    try_element_at map map_concat map_contains_key map_entries map_from_arrays
    map_from_entries map_keys map_values str_to_map named_struct struct aggregate array_sort
    exists filter forall map_filter map_zip_with reduce transform transform_keys
    transform_values zip_with explode explode_outer inline inline_outer posexplode
    posexplode_outer stack"""
    # JSON, CSV, URLs, misc
    """ from_csv from_json get_json_object json_array_length json_object_keys json_tuple
    schema_of_csv schema_of_json to_csv to_json parse_url try_parse_url try_url_decode
    url_decode url_encode monotonically_increasing_id typeof uuid"""
)

#: How an allowed function may be qualified: `f`, `builtin.f`, `system.builtin.f`.
ALLOWED_QUALIFIERS = frozenset({(), ("builtin",), ("system", "builtin")})

# -- expressions, by resolved class (analyzed plan) ---------------------------------------

ALLOWED_EXPRESSIONS = _words(
    # what every query is made of
    """Alias AttributeReference Literal OuterReference Cast TryEval KnownNotNull SortOrder
    AggregateExpression WindowExpression WindowSpecDefinition SpecifiedWindowFrame
    UnspecifiedFrame$ CurrentRow$ UnboundedPreceding$ UnboundedFollowing$ ScalarSubquery
    Exists ListQuery InSubquery LateralSubquery LambdaFunction NamedLambdaVariable
    GetStructField GetArrayStructFields GetArrayItem GetMapValue PivotFirst Grouping
    GroupingID ResolvedCollation Collate With CommonExpressionDef CommonExpressionRef"""
    # arithmetic, comparison, logic, conditional
    """ Add Subtract Multiply Divide IntegralDivide Remainder Pmod UnaryMinus UnaryPositive
    Abs TryAdd TrySubtract TryMultiply TryDivide TryMod BitwiseAnd BitwiseOr BitwiseXor
    BitwiseNot BitwiseCount BitwiseGet ShiftLeft ShiftRight ShiftRightUnsigned EqualTo
    EqualNullSafe EqualNull LessThan LessThanOrEqual GreaterThan GreaterThanOrEqual And Or
    Not In Between IsNull IsNotNull IsNaN IsUnknown IsNotUnknown Like ILike RLike LikeAny
    LikeAll NotLikeAny NotLikeAll CaseWhen If Coalesce Nvl Nvl2 NullIf NullIfResult NaNvl
    NullIfZero ZeroIfNull Greatest Least"""
    # math
    """ Acos Acosh Asin Asinh Atan Atan2 Atanh Bin BRound Cbrt Ceil Conv Cos Cosh Cot Csc
    EulerNumber Exp Expm1 Factorial Floor Hex Hypot Log Log10 Log1p Log2 Logarithm Pi Pow
    Rand Randn Rint Round RoundCeil RoundFloor Sec Signum Sin Sinh Sqrt Tan Tanh ToDegrees
    ToRadians Unhex Uniform WidthBucket"""
    # date, time, intervals
    """ AddMonths ConvertTimezone CurrentDate CurrentTimestamp CurrentTimeZone Now
    LocalTimestamp DateAdd DateSub DateDiff DateAddInterval DateAddYMInterval TimeAdd
    TimestampAddInterval TimestampAddYMInterval SubtractDates SubtractTimestamps DatetimeSub
    MultiplyInterval DivideInterval MultiplyDTInterval DivideDTInterval MultiplyYMInterval
    DivideYMInterval DateFormatClass DateFromUnixDate DayName DayOfMonth DayOfWeek DayOfYear
    Extract ExtractANSIIntervalYears ExtractANSIIntervalMonths ExtractANSIIntervalDays
    ExtractANSIIntervalHours ExtractANSIIntervalMinutes ExtractANSIIntervalSeconds
    ExtractIntervalYears ExtractIntervalMonths ExtractIntervalDays ExtractIntervalHours
    ExtractIntervalMinutes ExtractIntervalSeconds FromUnixTime FromUTCTimestamp ToUTCTimestamp
    Hour Minute Second SecondWithFraction LastDay MakeDate MakeDTInterval MakeInterval
    TryMakeInterval MakeYMInterval MakeTimestamp MakeTimestampNTZ MakeTimestampFromDateTime
    TryMakeTimestamp TryMakeTimestampFromDateTime Month MonthName MonthsBetween NextDay Quarter
    MicrosToTimestamp MillisToTimestamp NanosToTimestamp SecondsToTimestamp ParseToDate
    ParseToTimestamp ToUnixTimestamp UnixTimestamp UnixDate UnixMicros UnixMillis UnixSeconds
    TimeBucket TruncDate TruncTimestamp WeekDay WeekOfYear Year"""
    # strings, binary, hashes
    """ Ascii Base32 Base64 BinaryPad BinaryPredicate BitLength Chr Collation Concat ConcatWs
    Contains Decode StringDecode Elt Encode EndsWith FindInSet FormatNumber InitCap
    IsValidUTF8 JaroWinkler Left Length Levenshtein Lower Luhncheck MakeValidUTF8 Mask
    OctetLength Overlay Quote RandStr RegExpCount RegExpExtract RegExpExtractAll RegExpInStr
    RegExpReplace RegExpSubStr Reverse Right Sentences SoundEx SplitPart StartsWith StringInstr
    StringInstrWithOccurrence StringLocate StringLPad StringRPad StringRepeat StringReplace
    StringSpace StringSplit StringTranslate StringTrim StringTrimBoth StringTrimLeft
    StringTrimRight Substring SubstringIndex ToBinary TryToBinary ToCharacter ToNumber
    TryToNumber TryValidateUTF8 UnBase32 UnBase64 Upper ValidateUTF8 Crc32 Md5 Murmur3Hash Sha1
    Sha2 XxHash64"""
    # collections, higher-order functions, generators
    """ CreateArray CreateMap CreateNamedStruct ArrayAggregate ArrayAppend ArrayCompact
    ArrayContains ArrayDistinct ArrayExcept ArrayExists ArrayFilter ArrayForAll ArrayInsert
    ArrayIntersect ArrayJoin ArrayMax ArrayMin ArrayPosition ArrayPrepend ArrayRemove
    ArrayRepeat ArraySize ArraySort ArrayTransform ArrayUnion ArraysOverlap ArraysZip
    ElementAt TryElementAt Flatten Get Sequence Shuffle Size Slice SortArray MapConcat
    MapContainsKey MapEntries MapFilter MapFromArrays MapFromEntries MapKeys MapValues
    MapZipWith StringToMap TransformKeys TransformValues ZipWith Explode PosExplode Inline
    Stack"""
    # aggregate and window functions
    """ AnyValue ApproximatePercentile Average BitAndAgg BitOrAgg BitXorAgg BoolAnd BoolOr
    CollectList CollectSet Corr Count CountIf CovPopulation CovSample First HistogramNumeric
    HyperLogLogPlusPlus Kurtosis Last ListAgg Max MaxBy MaxMinByK Median Min MinBy Mode
    Percentile PercentileCont PercentileDisc RegrAvgX RegrAvgY RegrCount RegrIntercept RegrR2
    RegrSlope RegrSXX RegrSXY RegrSYY Skewness StddevPop StddevSamp Sum VariancePop
    VarianceSamp CumeDist DenseRank Lag Lead NthValue NTile PercentRank Rank RowNumber"""
    # JSON, CSV, URLs, misc
    """ GetJsonObject JsonObjectKeys JsonToStructs JsonTuple LengthOfJsonArray SchemaOfJson
    StructsToJson CsvToStructs SchemaOfCsv StructsToCsv ParseUrl TryParseUrl UrlDecode
    TryUrlDecode UrlEncode MonotonicallyIncreasingID TypeOf Uuid"""
)

#: Expressions of the parsed plan the parser makes out of syntax (resolved by the analyzer);
#: besides these, a parsed plan may hold the classes of `ALLOWED_EXPRESSIONS`.
PARSED_EXPRESSIONS = _words(
    """UnresolvedAlias UnresolvedAttribute UnresolvedExtractValue UnresolvedFunction
    UnresolvedGenerator UnresolvedNamedLambdaVariable UnresolvedOrdinal UnresolvedRegex
    UnresolvedStar UnresolvedStarExceptOrReplace UnresolvedWindowExpression
    UnresolvedCollation ExpressionWithUnresolvedIdentifier NamedArgumentExpression
    PipeExpression Cube Rollup GroupingSets WindowSpecReference"""
)

# -- operators ------------------------------------------------------------------------------

#: Logical operators of a parsed read-only query. Commands (DDL, DML, SET, EXECUTE IMMEDIATE,
#: DECLARE/SET VARIABLE, INSERT OVERWRITE DIRECTORY, scripts, TRANSFORM ... USING, CALL,
#: time travel, streaming) are plans too, and none of them is here.
PARSED_OPERATORS = _words(
    """Project Filter Aggregate Join LateralJoin Sort GlobalLimit LocalLimit LimitAll Offset
    Distinct Union Intersect Except SubqueryAlias UnresolvedWith Generate Pivot Unpivot Sample
    RepartitionByExpression UnresolvedHint OneRowRelation LocalRelation UnresolvedInlineTable
    UnresolvedRelation UnresolvedHaving UnresolvedQualify UnresolvedSubqueryColumnAliases
    WithWindowDefinition PipeOperator"""
)

#: Logical operators of an analyzed read-only query; its only leaves may be constants, CTE
#: references and the dataset's temp view.
ANALYZED_OPERATORS = _words(
    """Project Filter Aggregate Window Join LateralJoin Sort GlobalLimit LocalLimit Offset
    Distinct Deduplicate Union Intersect Except SubqueryAlias WithCTE CTERelationDef
    CTERelationRef Generate Expand Sample RepartitionByExpression ResolvedHint OneRowRelation
    LocalRelation PipeOperator View"""
)

#: Hints that only choose a join strategy (not REPARTITION/COALESCE/REBALANCE: the worker
#: owns the parallelism).
JOIN_HINTS = _words(
    """BROADCAST BROADCASTJOIN MAPJOIN MERGE SHUFFLE_MERGE MERGEJOIN SHUFFLE_HASH
    SHUFFLE_REPLICATE_NL"""
)

# -- functions that generate data from a constant ------------------------------------------

#: Functions whose output grows with one numeric argument: (argument position) by name, and
#: (field) by class. The argument must be a constant; sizes in one expression multiply (a
#: `transform(sequence(...), x -> repeat(...))` is their product) and the product is bounded
#: by `max_generated`. `sequence` is measured from its bounds and step.
SIZE_ARGUMENTS = {
    "repeat": 1,
    "space": 0,
    "lpad": 1,
    "rpad": 1,
    "randstr": 0,
    "array_repeat": 1,
    "array_insert": 1,
    "stack": 0,
    "histogram_numeric": 1,
    "format_number": 1,
}
SIZE_FIELDS = {
    "StringRepeat": "times",
    "StringSpace": "child",
    "StringLPad": "len",
    "StringRPad": "len",
    "BinaryPad": "len",
    "RandStr": "length",
    "ArrayRepeat": "right",
    "ArrayInsert": "posExpr",
    "HistogramNumeric": "nBins",
    "FormatNumber": "d",
}

#: `approx_count_distinct(x, rsd)` allocates 2^(2 log2(1.106 / rsd)) registers per group.
MIN_RELATIVE_SD = 0.01

#: Most grouping sets of a query (CUBE of 12 columns): the analyzer expands every one.
MAX_GROUPING_SETS = 4096

# -- the Connect guard: syntax of a parsed text (sqlglot) ---------------------------------

#: The sqlglot node types a read-only query is made of, besides function calls (which are
#: checked by name against `ALLOWED_FUNCTIONS`: `spark_workers.text_guard`). The counterpart
#: of `PARSED_OPERATORS` and `PARSED_EXPRESSIONS` for the guard that parses text without a
#: JVM. No `Command`, DDL/DML node, `QueryTransform` (`TRANSFORM ... USING`), `Version`
#: (time travel), `Into`, `Set`, `Cache`, `Use`, `Describe`, `Aliases` (`AS (a, b)`, which
#: the parsed-plan check refuses as `MultiAlias`)...: whatever is not listed is refused.
#: (`JSONPath*` is the path argument of `get_json_object`, written back as a string;
#: `TimeStrToTime` the implied cast sqlglot puts in `date_format`, written back as nothing.)
TEXT_NODES = _words(
    # queries and their clauses
    """Select From Where Group Having Qualify Order Ordered Limit Offset Distinct Join Table
    TableAlias Subquery With CTE Union Intersect Except Values Tuple Lateral Pivot PivotAlias
    Cluster Distribute Sort Hint JoinHint Window WindowSpec Star Column Identifier Alias Dot
    Literal HexString Null Boolean Var DataType DataTypeParam Interval IntervalSpan Paren Cube
    Rollup GroupingSets Lambda Bracket Filter"""
    # operators (the SQL symbols of `ALLOWED_FUNCTIONS`) and syntax-shaped calls
    """ Add Sub Mul Div IntDiv Mod Neg BitwiseAnd BitwiseOr BitwiseXor BitwiseNot
    BitwiseLeftShift BitwiseRightShift EQ NEQ GT GTE LT LTE NullSafeEQ And Or Not Is In
    Between Like ILike RegexpLike DPipe Case If Cast TryCast Extract Exists Array Struct
    PropertyEQ Slice JSONPath JSONPathRoot JSONPathKey JSONPathSubscript TimeStrToTime"""
)
